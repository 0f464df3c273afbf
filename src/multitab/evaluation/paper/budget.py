"""The scale each run group trained at, read from its runs' records, and what that scale lets the numbers say.

One account for the report's banners and "What ran" (results/report.md, .html) and the entry page
(results/index.html): per run group (params `runs`) its datasets, runs, seeds, the epoch cap and the epochs run
by its neural models (XGBoost's boosting rounds are not epochs), the training rows per run, and a verdict in
words: the paper's protocol trains on every row with early stopping within 100 epochs (50 for AliExpress) over
5 seeds; MultiTab-Bench runs are judged against the study's budget (params `study`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from multitab.evaluation.bench.numbers import Budget
from multitab.evaluation.paper.runs import Run, RunSet
from multitab.registry import trains_in_epochs

PAPER_SEEDS = 5  # the paper's seeds per run (params.yaml: "paper: [0, 1, 2, 3, 4]")
PAPER_TRAINING = "every training row, early stopping within 100 epochs (50 for AliExpress), 5 seeds"
PIPELINE_CHECK = "checks the pipeline; not the paper's numbers"
NOT_TESTED = "not tested at this budget"


def no_epochs(model: str) -> bool:
    """Gradient boosting trains in boosting rounds, not epochs: no epoch cap, no learning curve (the registry's
    `epochs`)."""
    return not trains_in_epochs(model)


def span(values: Iterable[Any]) -> str:
    """'5', '2–6' or '' for the distinct whole numbers in `values` (None and NaN left out)."""
    nums = sorted({int(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))})
    if not nums:
        return ""
    return f"{nums[0]:,}" if nums[0] == nums[-1] else f"{nums[0]:,}–{nums[-1]:,}"


@dataclass(frozen=True)
class GroupBudget:
    group: str  # the run group (params `runs.<group>`), "unknown" for a record without one
    datasets: tuple[str, ...]
    synthetic: bool  # MultiTab-Bench configurations
    n_runs: int
    seeds: tuple[int, ...]
    epoch_cap: str  # the neural runs' `train.max_epochs` ("" = the authors' selection)
    epochs_run: str  # epochs the neural runs ran
    rows: str  # training rows per run ("" = not recorded)
    row_cap: str  # `train.max_train_rows` ("" = every row)
    standin: bool
    reduced: bool  # epochs or rows capped below the paper's training (real data), or below the study's budget
    meaning: str  # what the numbers can say, in words

    def scale(self) -> str:
        """'at most 2 epochs on 2,048 training rows per run, 1 seed'."""
        epochs = f"at most {self.epoch_cap} epochs" if self.epoch_cap else "the authors' epoch budget"
        rows = f"{self.rows} training rows per run" if self.rows else "training rows not recorded"
        n = len(self.seeds)
        return f"{epochs} on {rows}, {n} seed{'s' if n != 1 else ''}"

    def what(self) -> str:
        """'real data (aliexpress, acs_income, higgs)' or '9 MultiTab-Bench configurations'."""
        if self.synthetic:
            return f"{len(self.datasets)} MultiTab-Bench configuration{'s' if len(self.datasets) != 1 else ''}"
        kind = "stand-in data" if self.standin else "real data"
        return f"{kind} ({', '.join(self.datasets)})"


def _train(run: Run) -> dict[str, Any]:
    return ((run.extra.get("params") or {}).get("train")) or {}


def group_budgets(runs: RunSet, synthetic: Sequence[str], budget: Budget | None,
                  order: Sequence[str] = ()) -> list[GroupBudget]:
    """One GroupBudget per run group of `runs`, in the order first met, datasets in `order` (params.yaml's;
    others after, by name); `synthetic`: the MultiTab-Bench configurations; `budget`: the study's (None: no
    study section)."""
    by_group: dict[str, list[Run]] = {}
    rank = {d: i for i, d in enumerate(order)}
    for d in sorted(runs.datasets, key=lambda x: (rank.get(x, len(rank)), x)):
        for m in runs.models(d):
            for run in runs.runs(d, m).values():
                by_group.setdefault(str((run.extra.get("params") or {}).get("group") or "unknown"), []).append(run)
    out = []
    for group, members in by_group.items():
        datasets = tuple(dict.fromkeys(r.dataset for r in members))
        neural = [r for r in members if not no_epochs(r.model)]
        caps = {_train(r).get("max_epochs") for r in neural}
        row_caps = {_train(r).get("max_train_rows") for r in members} | {r.extra.get("max_train_rows") for r in members}
        epoch_cap = span(caps)
        row_cap = span(row_caps)
        rows = [(r.extra.get("n_rows") or {}).get("train") for r in members]
        seeds = tuple(sorted({r.seed for r in members}))
        is_synthetic = all(d in synthetic for d in datasets)
        standin = any(r.standin for r in members)
        if is_synthetic:
            known = [int(x) for x in rows if x]
            short = budget.shortfall(len(seeds), min(known) if known else None) if budget is not None else ""
            reduced = bool(short)  # an epoch cap is the convergence rule's to flag (the report's Convergence)
            meaning = (f"below the study's budget ({budget.describe()}): the paper's claim is {NOT_TESTED}; "
                       "make study tests it" if short and budget is not None
                       else "at the study's budget: the claim's verdicts stand")
        else:
            reduced = bool(epoch_cap) or bool(row_cap)
            if standin:
                meaning = f"stand-in data: {PIPELINE_CHECK}"
            elif reduced:
                meaning = f"reduced training: {PIPELINE_CHECK}"
            elif len(seeds) < PAPER_SEEDS:
                meaning = f"the paper's training with {len(seeds)} of its {PAPER_SEEDS} seeds"
            else:
                meaning = "the paper's training and seeds: compared with the paper's numbers"
        out.append(GroupBudget(group, datasets, is_synthetic, len(members), seeds, epoch_cap,
                               span(r.extra.get("epochs") for r in neural), span(rows), row_cap, standin,
                               reduced, meaning))
    return out


def reduced_banner(budgets: Sequence[GroupBudget], esc: Callable[[object], str]) -> str:
    """The REDUCED TRAINING line of the report and the entry page, names written with `esc`
    (multitab.markup's md_text or html_text); '' when no group was cut down."""
    cut = [b for b in budgets if b.reduced]
    if not cut:
        return ""
    parts = "; ".join(f"run group {esc(b.group)}, {esc(b.what())}: {b.scale()}" for b in cut)
    return (f"{parts}. The paper's protocol: {PAPER_TRAINING}. These runs check the pipeline; their numbers are "
            "not the paper's.")


def not_tested_banner(budgets: Sequence[GroupBudget], esc: Callable[[object], str]) -> str:
    """The NOT TESTED line when MultiTab-Bench runs are below the study's budget ('' otherwise)."""
    below = [b for b in budgets if b.synthetic and NOT_TESTED in b.meaning]
    if not below:
        return ""
    groups = ", ".join(esc(b.group) for b in below)
    return (f"the paper's MultiTab-Bench claim (MultiTab-Net's Δm above MMoE's, PLE's and STEM's) is not tested by run "
            f"group {groups}, whose runs are below the study's budget; make study tests it (docs/study.md).")
