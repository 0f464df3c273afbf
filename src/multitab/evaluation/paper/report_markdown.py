"""The report's Markdown (results/report.md): banners, the inputs, the tables and figures in the paper's
order, the agreement with the published numbers, and the MultiTab-Bench section it leads with."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation.bench.numbers import Budget, StudySettings, collect
from multitab.evaluation.bench.study import section_only
from multitab.evaluation.paper.budget import (
    NOT_TESTED,
    GroupBudget,
    group_budgets,
    no_epochs,
    not_tested_banner,
    reduced_banner,
    span,
)
from multitab.evaluation.paper.results import PaperResults
from multitab.evaluation.paper.runs import Run
from multitab.evaluation.tables import MISSING, STANDIN_MARK, Table
from multitab.markup import md_text


@dataclass(frozen=True)
class Provenance:
    """What the report cannot read from the runs: the code and params it was built from, and the scale at
    which the MultiTab-Bench claim counts as tested (None: no `study` section, every verdict stands)."""

    commit: str = "unknown"
    params_sha256: str = "unknown"
    budget: Budget | None = None


_SOURCES = {"standin": STANDIN_MARK, "local": "real (local file)", "remote": "real (download)",
            "synthetic": "MultiTab-Bench (generated)"}


def _span(values: Iterable[Any]) -> str:
    """'5', '2–6' or MISSING for the distinct numbers in `values`."""
    return span(values) or MISSING


def _is_xgboost(run: Run) -> bool:
    return no_epochs(run.model)


def _steps(run: Run) -> int | None:
    """Optimiser steps of a run: epochs x batches per epoch (None when the record lacks either)."""
    rows = (run.extra.get("n_rows") or {}).get("train")
    batch = ((run.extra.get("params") or {}).get("train") or {}).get("batch_size")
    epochs = run.extra.get("epochs")
    if not (rows and batch and epochs) or _is_xgboost(run):
        return None
    return int(epochs) * math.ceil(int(rows) / int(batch))


def what_ran_section(results: PaperResults, prov: Provenance, budgets: Sequence[GroupBudget] = ()) -> list[str]:
    """The report's first screen: the code, params and settings the runs were built from, per dataset the
    data, seeds, rows, epochs and optimiser steps, and what the report can and cannot show at that scale."""
    all_runs = [r for d in results.runs.datasets for m in results.runs.models(d)
                for r in results.runs.runs(d, m).values()]
    protocols = sorted({str(r.extra["protocol"]) for r in all_runs if r.extra.get("protocol")})
    selections = sorted({str((r.extra.get("hparams") or {}).get("source")) for r in all_runs
                         if isinstance(r.extra.get("hparams"), dict) and r.extra["hparams"].get("source")})
    lines = ["## What ran", "",
             f"Commit `{prov.commit}`, params.yaml sha256 `{prov.params_sha256[:16]}`; protocol "
             f"{md_text(', '.join(protocols)) or MISSING}; "
             f"hyperparameters: {md_text(', '.join(selections)) or MISSING} selections "
             "(params `train.hparams`).", "",
             "| Dataset | Data | Runs | Seed ids | Training rows per run | Epochs run (cap) "
             "| Optimiser steps per run |",
             "|---|---|---:|---|---:|---|---:|"]
    others = [x for x in results.runs.datasets if x not in results.config.datasets and x not in results.synthetic]
    for d in [*results.config.datasets, *results.synthetic, *others]:
        runs = [r for m in results.runs.models(d) for r in results.runs.runs(d, m).values()]
        if not runs:
            lines.append(f"| {md_text(d)} | {MISSING} | 0 | {MISSING} | {MISSING} | {MISSING} | {MISSING} |")
            continue
        sources = sorted({_SOURCES.get(str(r.extra.get("source")), STANDIN_MARK if r.standin else "real")
                          for r in runs})
        neural = [r for r in runs if not _is_xgboost(r)]  # XGBoost's boosting rounds are not epochs
        epochs = _span(r.extra.get("epochs") for r in neural)
        caps = _span(r.extra.get("max_epochs") for r in neural)
        seeds = ", ".join(map(str, sorted({r.seed for r in runs})))
        lines.append(f"| {md_text(d)} | {', '.join(sources)} | {len(runs)} | {seeds} "
                     f"| {_span((r.extra.get('n_rows') or {}).get('train') for r in runs)} | {epochs} ({caps}) "
                     f"| {_span(_steps(r) for r in runs)} |")
    lines += ["", "Epochs and steps count the neural models (XGBoost's boosting rounds are not epochs).", "",
              *_left_out(results), *_can_show(results, budgets), ""]
    return lines


def _left_out(results: PaperResults) -> list[str]:
    """Per declared dataset, the columns of its file that are neither feature nor task, and why (metrics.json's
    `columns_left_out`: declared in features.drop, or one value in every training row)."""
    out = []
    for d in results.runs.datasets:
        left: dict[str, str] = {}
        for r in (r for m in results.runs.models(d) for r in results.runs.runs(d, m).values()):
            left |= r.extra.get("columns_left_out") or {}
        if left:
            shown = "; ".join(f"{md_text(c)} ({md_text(why)})" for c, why in left.items())
            out.append(f"- {md_text(d)}: columns of the file left out: {shown}.")
    return out


def _can_show(results: PaperResults, budgets: Sequence[GroupBudget]) -> list[str]:
    """What the numbers of each run group can show at the scale it ran."""
    out = [f"- Run group {md_text(b.group)}, {md_text(b.what())}: {b.scale()}: {b.meaning}." for b in budgets]
    standin = [d for d in results.config.datasets if results.runs.standin(d)]
    if standin:
        out.append(f"- {md_text(', '.join(standin))}: generated stand-in data; the paper's values are not set beside "
                   "their numbers.")
    elif any(b.reduced for b in budgets if not b.synthetic):
        out.append("- No paper value is set beside the real datasets' numbers: the comparison needs the paper's "
                   "training (`train.max_train_rows: null`, `train.max_epochs: null`).")
    return out or ["- Nothing ran: every table below reads `missing`."]


def inputs_section(results: PaperResults) -> list[str]:
    cfg = results.config
    lines = ["## Inputs", "",
             "| Dataset | Data | Seeds expected | Complete run sets | Incomplete or missing |",
             "|---|---|---|---|---|"]
    for d in (*cfg.datasets, *results.synthetic):
        seeds = results.runs.seeds(d)
        flag = results.runs.standin(d)
        data = MISSING if flag is None else (STANDIN_MARK if flag else "real")
        if d in results.synthetic and flag is False:
            data = "MultiTab-Bench (generated)"
        names = [*cfg.rows, *(r.model for r in cfg.ablation if r.model not in cfg.rows)]
        if d not in cfg.datasets:
            names = [cfg.baseline, *cfg.figures.models]
        complete = [m for m in names if results.runs.matrix(d, m) is not None]
        incomplete = [f"{md_text(m)} ({results.runs.n_found(d, m)}/{len(seeds)})" for m in names if m not in complete]
        named = (f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}") if seeds else MISSING
        lines.append(f"| {md_text(d)} | {data} | {named} | {len(complete)} | "
                     f"{', '.join(incomplete) or '—'} |")
    unused = [d for d in results.runs.datasets if d not in cfg.datasets and d not in results.synthetic]
    if unused:
        lines += ["", f"Runs of datasets named neither in aggregate.datasets nor in bench.configs (not used): "
                      f"{md_text(', '.join(unused))}."]
    shown = {*cfg.rows, *(r.model for r in cfg.ablation)}
    extra = [f"{d}/{m}" for d in cfg.datasets for m in results.runs.models(d) if m not in shown]
    if extra:
        lines += ["", "Run sets in no table (add them to aggregate.models or aggregate.ablation): "
                      f"{md_text(', '.join(extra))}."]
    return lines + [""]


def agreement_section(tables: Sequence[Table]) -> list[str]:
    lines = ["## Agreement with the published numbers", "",
             "| Table | Cells with a published value | Ours missing | Mean abs. difference | Max abs. difference |",
             "|---|---:|---:|---:|---:|"]
    for t in tables:
        cells = [c for _, _, c in t.cells() if c.paper is not None]
        if not cells:
            continue
        diffs = [abs(c.difference) for c in cells if c.difference is not None]
        missing = sum(c.difference is None for c in cells)
        mean = f"{sum(diffs) / len(diffs):.4f}" if diffs else MISSING
        mx = f"{max(diffs):.4f}" if diffs else MISSING
        name = f"{md_text(t.name)}{' (' + STANDIN_MARK + ')' if t.standin else ''}"
        lines.append(f"| {name} | {len(cells)} | {missing} | {mean} | {mx} |")
    return lines + [""]


def validation_banner(results: PaperResults) -> list[str]:
    """Warnings of the data validation (params validation.policy: warn) carried by the runs' metrics.json."""
    out = []
    for d in results.runs.datasets:
        warns = sorted({w for m in results.runs.models(d) for r in results.runs.runs(d, m).values()
                        for w in r.extra.get("validation_warnings") or []})
        if warns:
            shown = "; ".join(map(md_text, warns[:5])) + (f"; ... {len(warns) - 5} more" if len(warns) > 5 else "")
            out += [f"> **DATA DIFFERS FROM THE PUBLISHED FACTS ({md_text(d)})**: {len(warns)} validation check(s) "
                    f"of estimates did not hold and were let through as warnings (params `validation.policy.{d}`): "
                    f"{shown}. See reports/validation/index.html.", ""]
    return out


@dataclass(frozen=True)
class BenchInputs:
    """The MultiTab-Bench runs of the default report (run group `bench`) as the study's code reads them."""

    metrics: pd.DataFrame  # multitab.evaluation.bench.numbers.collect's rows
    settings: StudySettings
    models: list[str]  # the baseline first, then the figures' models


def bench_inputs(results: PaperResults, runs_dir: Path | None, budget: Budget | None = None) -> BenchInputs | None:
    """The bench runs under `runs_dir` of the MultiTab-Bench configurations (None: no such run)."""
    if runs_dir is None or not results.synthetic:
        return None
    cfg = results.config
    models = [cfg.baseline, *[m for m in cfg.figures.models if m != cfg.baseline]]
    metrics, _ = collect(runs_dir, results.synthetic, models)
    if metrics.empty:
        return None
    settings = StudySettings(baseline=cfg.baseline, model=cfg.significance.model,
                             rivals=tuple(m for m in cfg.figures.models if m != cfg.significance.model),
                             budget=budget)
    return BenchInputs(metrics, settings, models)


def bench_section(bench: BenchInputs | None, figure_paths: dict[str, Path], report_path: Path,
                  convergence_csv: Path | None = None) -> str:
    """The MultiTab-Bench section the report leads with: Δm (mean ± σ) per configuration and model and the
    paper's claim checked per configuration (multitab.evaluation.bench.study); empty without bench runs.
    Points at a `make study` report when one exists beside it; `convergence_csv`: where the runs' convergence
    flags are written (the section lists them there)."""
    if bench is None:
        return ""
    prefix = os.path.relpath(figure_paths["figure5"].parent, report_path.parent) + "/"
    header = ["From the run group `bench` (params `runs.bench`; the default is one seed for a few epochs, and "
              "with one seed no t-test is run). `make study` trains Figures 5-6 to convergence over several seeds "
              "(docs/study.md).", ""]
    study_report = report_path.parent / "study_report" / "report.md"
    if study_report.is_file():
        header += [f"A `make study` report exists: [{os.path.relpath(study_report, report_path.parent)}]"
                   f"({os.path.relpath(study_report, report_path.parent)}).", ""]
    listed = None
    if convergence_csv is not None:
        rel = os.path.relpath(convergence_csv, report_path.parent).replace(os.sep, "/")
        listed = f"[{rel}]({rel})"
    return section_only(bench.metrics, bench.settings, bench.models, header=header, figure_prefix=prefix,
                        convergence_file=listed)


def banners(results: PaperResults, tables: Sequence[Table], figure_tables: Sequence[Table],
            budgets: Sequence[GroupBudget]) -> list[str]:
    """The report's first lines: stand-in data, validation warnings, reduced training, the claim not tested."""
    standin = sorted({d for t in (*tables, *figure_tables) for d in t.standin})
    lines = []
    if standin:
        lines += [f"> **{STANDIN_MARK.upper()}**: inputs {md_text(', '.join(standin))} come from generated "
                  "stand-in data. "
                  "Every number built from them is a pipeline check, not a result of the study.", ""]
    lines += validation_banner(results)
    if reduced := reduced_banner(budgets, md_text):
        lines += [f"> **REDUCED TRAINING**: {reduced}", ""]
    if below := not_tested_banner(budgets, md_text):
        lines += [f"> **{NOT_TESTED.upper()}**: {below}", ""]
    return lines


def render_report(results: PaperResults, tables: Sequence[Table], figure_tables: Sequence[Table],
                  figure_paths: dict[str, Path], report_path: Path, curves_section: str = "",
                  lead_section: str = "", provenance: Provenance | None = None,
                  figure_notes: dict[str, str] | None = None, *, lead_figures: bool = False,
                  study_index: Path | None = None) -> str:
    """The report's Markdown; `lead_section`: the MultiTab-Bench section it leads with (`lead_figures`: which
    shows Figures 5 and 6, so they are not drawn twice); `study_index`: the committed study records' page (or
    README), linked near the top."""
    cfg = results.config
    prov = provenance or Provenance()
    budgets = group_budgets(results.runs, list(results.synthetic), prov.budget, [*cfg.datasets, *results.synthetic])
    lines = ["# MultiTab: the study's tables and figures, regenerated", "",
             *banners(results, tables, figure_tables, budgets)]
    if study_index is not None:
        rel = os.path.relpath(study_index, report_path.parent).replace(os.sep, "/")
        lines += [f"The study's answer, trained at a larger scale and committed: [results/study/]({rel}) (every "
                  "record, its verdicts per configuration and its figures; docs/study.md says how each was run). "
                  "The MultiTab-Bench numbers below are this run's.", ""]
    lines += what_ran_section(results, prov, budgets)
    # the paper's values beside ours only for real data trained as the paper trains
    caps = any(b.reduced for b in budgets if not b.synthetic)
    if lead_section:
        lines += [lead_section, ""]
    lines += [
        "Metrics in percent (AUC, explained variance), Δm in percent (Equation 5, against "
        f"{cfg.label(cfg.baseline)}), MSE in target units, p-values one-sided. Where the paper printed a value and "
        "the runs are real data under the paper's training, the cell reads `ours (paper P; Δ ours − paper)`. "
        "`missing` marks a run that failed or was not run "
        "(`missing (k/n seeds)`: only k of the n expected seeds exist); it is never replaced by a number.", "",
    ]
    lines += inputs_section(results)
    by_name = {t.name: t for t in tables}
    order = ["table2_ablation", "table3_test_results", "figure5", "figure6", "table4_params_flops"]
    order += [t.name for t in tables if t.name.startswith(("table5", "table6", "table7"))]
    order += ["table8_t_test", "table9_wilcoxon", "table10_higgs_mse"]
    fig_tables = {t.name: t for t in figure_tables}
    # The paper's value beside ours only where the comparison means something: real data under the paper's
    # training (no stand-in input, no capped rows or epochs). Everywhere else comparison_with_paper.csv keeps it.
    for name in order:
        if name in by_name:
            table = by_name[name]
            compare = not table.standin and not caps
            lines.append(table.to_markdown(compare=compare, heading="##"))
            if not compare and table.has_paper():
                why = "stand-in data" if table.standin else "capped training"
                lines += [f"The paper's values are left out of this table ({why}: the comparison would be with noise; "
                          "results/tables/comparison_with_paper.csv keeps them).", ""]
            continue
        if name in ("figure5", "figure6"):
            number = name[-1]
            ft = fig_tables[f"{name}_delta_m"]
            title = ("Figure 5: Δm under varied task correlation, complexity and count" if number == "5"
                     else "Figure 6: Δm with non-uniform task complexities")
            mark = f" [{STANDIN_MARK}]" if ft.standin else ""
            rel = os.path.relpath(figure_paths[name], report_path.parent).replace(os.sep, "/")
            shown = (f"Drawn in the MultiTab-Bench section above ([{rel}]({rel})). " if lead_figures
                     else "")
            lines += [f"## {title}{mark}", "", *([] if lead_figures else [f"![{title}]({rel})", ""]),
                      shown + "The paper publishes Figures 5 and 6 as bar charts only (no numbers to compare). "
                      + (figure_notes or {}).get(name, ""), ""]
            lines.append(ft.to_markdown(heading="###"))
    lines += agreement_section(tables)
    if curves_section:
        lines.append(curves_section)
    return "\n".join(lines)
