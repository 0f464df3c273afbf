"""Figures 5 and 6 in the paper's layout with one MultiTab-Net row per arm, for an attribution record whose
arms differ in MultiTab-Net alone (params.yaml `attribution` with run_arms [A6_mask_t_t, A7_inter_sample]: the
authors' per-sample mixing and the paper-text attention across the batch, on the same rival runs).

Drawn only when every arm reads the very same runs of every other model (the `run` column), so the rivals'
bars are one set of runs and only MultiTab-Net's differ; a ladder whose arms change the rivals too (the
eight-arm record) gets no such figure. Δm per seed against the arms' shared STL, mean ± SE over seeds, as the
study's figures. Such a record's section.md also opens with the answer per figure and layer (`figure_answer`:
the verdicts over the configurations it holds, each with its gap to the best rival).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation.bench.numbers import (
    FIGURE5_GROUPS,
    FIGURE6_GROUPS,
    StudySettings,
    configs_from_metrics,
    delta_m_runs,
    figure_number,
    summarise,
)
from multitab.evaluation.bench.render import figure_frame, not_above, ordered, plus_minus

FIGURES = (
    ("figure5_layers", FIGURE5_GROUPS, "Figure 5: Δm (%) vs STL, MultiTab-Net with each inter-sample layer"),
    ("figure6_layers", FIGURE6_GROUPS, "Figure 6: Δm (%) vs STL, MultiTab-Net with each inter-sample layer"),
)


def shares_rivals(metrics: pd.DataFrame, settings: StudySettings) -> bool:
    """Whether the record has two or more arms and each reads the same runs of every model but the claim's."""
    arms = list(dict.fromkeys(metrics["arm"]))
    others = metrics[metrics["model"] != settings.model]
    runs = [frozenset(others.loc[others["arm"] == arm, "run"]) for arm in arms]
    return len(arms) >= 2 and bool(runs[0]) and all(r == runs[0] for r in runs[1:])


def layer_model(settings: StudySettings, arm: str) -> str:
    return f"{settings.label(settings.model)} ({arm})"


def layer_metrics(metrics: pd.DataFrame, settings: StudySettings) -> pd.DataFrame:
    """One arm's rival and baseline rows, and every arm's MultiTab-Net rows named after their arm."""
    arms = list(dict.fromkeys(metrics["arm"]))
    rivals = metrics[(metrics["arm"] == arms[0]) & (metrics["model"] != settings.model)]
    models = [metrics[(metrics["arm"] == arm) & (metrics["model"] == settings.model)].assign(
        model=layer_model(settings, arm)) for arm in arms]
    return pd.concat([rivals, *models], ignore_index=True).drop(columns=["arm", "run"])


def layer_figures(metrics: pd.DataFrame, settings: StudySettings, out: Path) -> list[Path]:
    """figures/figure5_layers.{png,svg} and figure6_layers.* of an arms record whose arms share their rivals;
    none otherwise (and none for a figure none of whose configurations was run)."""
    from multitab.evaluation import figures

    if not shares_rivals(metrics, settings):
        return []
    frame = layer_metrics(metrics, settings)
    configs = configs_from_metrics(frame)
    rivals = [m for m in dict.fromkeys(frame["model"]) if m != settings.baseline and not m.startswith(
        settings.label(settings.model))]
    plotted = rivals + [layer_model(settings, arm) for arm in dict.fromkeys(metrics["arm"])]
    table = figure_frame(summarise(delta_m_runs(frame, settings.baseline)), configs, plotted, settings)
    written: list[Path] = []
    for name, groups, title in FIGURES:
        part = table[table.group.isin(groups)]
        if part.empty:
            continue
        fig = figures.delta_m_figure(part, groups, [settings.label(m) for m in plotted], title)
        written += figures.save_figure(fig, out / "figures", name, settings.dpi)
    return written


def arm_layers(table: pd.DataFrame) -> dict[str, str]:
    """arm -> its inter-sample layer: the last `inter_sample=` any arm up to it changed (the ladder's `changed`,
    arms in order; the first arm lists every factor)."""
    layer, out = "an unstated inter-sample layer", {}
    for arm, changed in dict(zip(table["arm"], table["changed"], strict=False)).items():
        found = re.findall(r"inter_sample=(\w+)", changed)
        layer = found[-1] if found else layer
        out[arm] = layer
    return out


def _notes(r: Any) -> str:
    """" (not above PLE p 0.071; 80 % power: 6 seeds, holds)": a cell's short_of and, when inconclusive, the seeds
    that would decide it (the ladder's `seeds_80`); "" when neither."""
    seeds = r.seeds_80 if isinstance(getattr(r, "seeds_80", ""), str) else ""
    parts = [not_above(r.short_of, "", ""), *([f"80 % power: {_seeds_words(seeds)}"] if seeds else [])]
    parts = [p for p in parts if p]
    return f" ({'; '.join(parts)})" if parts else ""


def _seeds_words(seeds: str) -> str:
    """"6 (holds)" -> "6 seeds, holds"; "> 50" -> "> 50 seeds"."""
    count, _, verdict = seeds.partition(" (")
    return f"{count} seeds" + (f", {verdict.rstrip(')')}" if verdict else "")


def figure_answer(table: pd.DataFrame, metrics: pd.DataFrame, settings: StudySettings) -> list[str]:
    """section.md lines answering the paper's claim per figure and per MultiTab-Net layer: the verdicts over the
    configurations of that figure this record holds, each with its gap to the best rival (± SE), where it is
    above some rivals only, the others with their p, and where it is inconclusive, the seeds that would decide it
    at 80 % power (bench/power.py), in the paper's order (its x-axes, group by group)."""
    configs = configs_from_metrics(metrics)
    figure_of = {c.name: figure_number(c) for c in configs.values()}
    model, rivals = settings.label(settings.model), ", ".join(settings.label(r) for r in settings.rivals)
    lines = ["### The answer per figure and layer", "",
             f"The claim: {model}'s Δm significantly above every rival's ({rivals}) at α {settings.alpha:g}; gap to "
             "the best rival ± SE, in points, over the configurations this record holds; for an inconclusive one, "
             "the seeds per model that would decide it at 80 % power, simulated from its observed means and spreads "
             "under the same rule (a planning estimate; docs/study.md, \"Power\").", ""]
    paper_order = list(dict.fromkeys(c.name for _, c in ordered(configs, (*FIGURE5_GROUPS, *FIGURE6_GROUPS))))
    for figure in ("5", "6"):
        names = [c for c in paper_order if figure_of.get(c) == figure]
        for arm, layer in arm_layers(table).items():
            rows = table[(table.arm == arm) & table.config.isin(names) & (table.verdict != "missing")]
            rows = rows.sort_values("config", key=lambda col: col.map(names.index), kind="stable")
            if rows.empty:
                continue
            counts = rows["verdict"].value_counts()
            says = ", ".join(f"**{v}** on {counts[v]}" for v in ("holds", "inconclusive", "does not hold")
                             if v in counts)
            each = ", ".join(f"{r.config} {plus_minus(r.gap, r.gap_se)}{_notes(r)}" for r in rows.itertuples())
            lines.append(f"- Figure {figure}, {model} with {layer} ({arm}): {says} of the {len(rows)} "
                         f"configuration(s) run ({each}).")
    return lines + [""]
