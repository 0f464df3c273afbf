"""The pretrained in-context models beside the multitask models on the MultiTab-Bench configurations: per
configuration, each model's test explained variance averaged over the tasks (and the seeds), the bench runs'
from their metrics (multitab.evaluation.bench.numbers.collect) and the `icl` stage's from its records
(multitab.icl.records). The in-context models train nothing on these data and predict each task alone, so the
comparison says how far a pretrained single-task model gets without training, not what multitask learning adds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from multitab.icl.records import LABELS
from multitab.markup import md_text


def _icl_cell(records: Sequence[Mapping[str, Any]], tasks: Sequence[str]) -> str:
    """The seed mean of the tasks' mean test EV (%) where every seed scored every task; else the records' words."""
    means = []
    for record in records:
        values = [record["test"].get(t) for t in tasks]
        if any(v is None for v in values):
            words = sorted({str(record["status"].get(t, "missing")) for t in tasks} - {"ok"})
            return md_text(", ".join(words) or "missing")
        means.append(100 * sum(values) / len(values))
    return f"{sum(means) / len(means):.2f}"


def icl_beside_bench(metrics: pd.DataFrame, models: Sequence[str], labels: Mapping[str, str],
                     icl: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]]) -> str:
    """A Markdown subsection (empty when no `icl` record names a configuration of `metrics`)."""
    configs = list(dict.fromkeys(metrics["config"]))
    icl_models = sorted({m for (c, m) in icl if c in configs})
    if not icl_models:
        return ""
    head = ["Configuration", *[labels.get(m, m) for m in models],
            *[f"{LABELS.get(m, m)} (pretrained)" for m in icl_models]]
    lines = ["### Pretrained in-context models on the same data", "",
             "Test explained variance (%) averaged over each configuration's tasks, then over seeds: the multitask "
             "models of run group `bench` and the `icl` stage's pretrained models (results/icl), which train nothing "
             "on these data and predict each task on its own. Orion-MSP classifies only, so its cells read "
             "\"not applicable\". The in-context models' profile (context rows, rows scored, views) is in "
             "results/icl/summary.md.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for config in configs:
        part = metrics[metrics["config"] == config]
        tasks = sorted(part["task"].unique())
        cells = [md_text(config)]
        for model in models:
            runs = part[part["model"] == model]
            per_seed = runs.groupby("seed")["test_ev"].mean() * 100
            cells.append(f"{per_seed.mean():.2f}" if len(per_seed) else "missing")
        cells += [_icl_cell(icl[(config, m)], tasks) if (config, m) in icl else "missing" for m in icl_models]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
