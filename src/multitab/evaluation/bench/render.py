"""The MultiTab-Bench study's Markdown and figures: the Δm and claims tables, the Figure 5/6 rows, the
learning-curve grid and the report section (see study.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation import figures
from multitab.evaluation.bench.numbers import (
    BELOW_BUDGET,
    FIGURE5_GROUPS,
    FIGURE6_GROUPS,
    StudySettings,
    below_budget,
    figure_number,
)


def ordered(configs: Mapping[str, SyntheticConfig], groups: Sequence[str]) -> list[tuple[str, SyntheticConfig]]:
    """(group, configuration) in the paper's order: group by group, each sorted along its x-axis."""
    out = []
    for group in groups:
        members = sorted((c for c in configs.values() if group in c.groups), key=lambda c: c.sort_key(group))
        out += [(group, c) for c in members]
    return out


def figure_frame(summary: pd.DataFrame, configs: Mapping[str, SyntheticConfig], models: Sequence[str],
                 settings: StudySettings) -> pd.DataFrame:
    """Rows for `figures.delta_m_figure` (group, config, level, model label, delta_m, se, ...)."""
    records = []
    index = summary.set_index(["config", "model"])
    for group, conf in ordered(configs, (*FIGURE5_GROUPS, *FIGURE6_GROUPS, "other")):
        for model in models:
            hit = index.loc[(conf.name, model)] if (conf.name, model) in index.index else None
            records.append({"group": group, "config": conf.name, "level": conf.level(group),
                            "model": settings.label(model),
                            "delta_m": math.nan if hit is None else float(hit["mean"]),
                            "se": math.nan if hit is None else float(hit["se"]),
                            "n_seeds": 0 if hit is None else int(hit["n_seeds"]),
                            "missing": hit is None, "standin": False, "data": "synthetic"})
    return pd.DataFrame.from_records(records, columns=["group", "config", "level", "model", "delta_m", "se",
                                                       "n_seeds", "missing", "standin", "data"])


def _fmt(x: float, decimals: int = 2) -> str:
    return "missing" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{decimals}f}"


def plus_minus(x: float, se: float | None = None) -> str:
    """`+1.23 ± 0.45` (two decimals, signed; no `±` without a standard error), or `missing`."""
    text = _fmt(x)
    return text if text == "missing" or se is None or math.isnan(se) else f"{text} ± {se:.2f}"


def not_above(rivals: Any, lead: str = ", ", end: str = "") -> str:
    """", not above PLE p 0.071" (`lead` and `end` around it) for a ladder's `short_of` cell (bench/numbers.py
    `short_of`); "" for an empty one (read back from a CSV as NaN)."""
    return f"{lead}not above {rivals}{end}" if isinstance(rivals, str) and rivals else ""


def _p(x: float) -> str:
    return "n/a" if math.isnan(x) else (f"{x:.2g}" if x < 0.001 else f"{x:.3f}")


def delta_m_markdown(summary: pd.DataFrame, configs: Mapping[str, SyntheticConfig], models: Sequence[str],
                     settings: StudySettings) -> str:
    index = summary.set_index(["config", "model"])
    header = ["Configuration", "Figure", "Setting"] + [settings.label(m) for m in models]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    seen = set()
    for _group, conf in ordered(configs, (*FIGURE5_GROUPS, *FIGURE6_GROUPS, "other")):
        if conf.name in seen:
            continue
        seen.add(conf.name)
        figure = figure_number(conf) or "-"
        cells = []
        for model in models:
            if (conf.name, model) not in index.index:
                cells.append("missing")
                continue
            hit = index.loc[(conf.name, model)]
            se = "" if math.isnan(float(hit["se"])) else f" ± {float(hit['se']):.2f}"
            cells.append(f"{float(hit['mean']):+.2f}{se} (n={int(hit['n_seeds'])})")
        lines.append("| " + " | ".join([conf.name, figure, conf.level("nonuniform")] + cells) + " |")
    return "\n".join(lines)


def claims_markdown(table: pd.DataFrame, settings: StudySettings) -> str:
    header = ["Configuration", "Verdict"] + [f"vs {settings.label(r)}: Δ (p above / below, Holm)"
                                             for r in settings.rivals]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for conf, part in table.groupby("config", sort=False):
        cells = []
        for rival in settings.rivals:
            r = part[part.rival == rival].iloc[0]
            cells.append("missing" if r["status"] == "missing" else
                         f"{_fmt(float(r['difference']))} ({_p(float(r['p_value']))} / {_p(float(r['p_below_holm']))})")
        lines.append("| " + " | ".join([str(conf), f"**{part.iloc[0]['verdict']}**"] + cells) + " |")
    return "\n".join(lines)


def curves_figure(curves: pd.DataFrame, configs: Sequence[str], models: Sequence[str],
                  settings: StudySettings) -> Any:
    """A grid with one panel per configuration: the seed-mean validation EV per epoch of every model."""
    import matplotlib.pyplot as plt

    n = max(len(configs), 1)
    cols = min(3, n)
    rows_ = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(max(4.0 * cols, 7.5), 3.0 * rows_ + 1.2), squeeze=False,
                             layout="constrained")
    colours = figures.model_colours([settings.label(m) for m in models])  # as in every other figure
    for k, conf in enumerate(configs):
        ax = axes[k // cols][k % cols]
        part = curves[curves.config == conf]
        for model in models:
            series = part[part.model == model].groupby("epoch")["val_mean"].mean()
            if not series.empty:
                ax.plot(series.index, series.to_numpy(), color=colours[settings.label(model)],
                        label=settings.label(model), linewidth=1.2)
        if part.empty:
            ax.text(0.5, 0.5, "missing: no learning-curve log", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(conf, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel("val. mean EV", fontsize=8)
    for k in range(n, rows_ * cols):
        axes[k // cols][k % cols].set_axis_off()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    figures.mark_figure(fig, "Learning curves: validation mean EV per epoch (seed mean)", False)
    return fig


def _below_budget_note(metrics: pd.DataFrame, settings: StudySettings) -> list[str]:
    """Why configurations read `not tested at this budget`: their runs have fewer seeds or training rows
    than the study (params `study`)."""
    short = below_budget(metrics, settings.budget)
    if not short or settings.budget is None:
        return []
    reasons = set(short.values())
    where = (f"every configuration ({reasons.pop()})" if len(short) == len(set(metrics["config"])) and
             len(reasons) == 1 else "; ".join(f"{c} ({r})" for c, r in short.items()))
    return [f"> **{BELOW_BUDGET.upper()}**: the runs of {where} are below the study's budget "
            f"({settings.budget.describe()}; params `study`). Their Δm are shown; they give no verdict on "
            "the claim. `make study` trains at that budget (docs/study.md).", ""]


def _not_converged_warning(conv: pd.DataFrame, settings: StudySettings) -> list[str]:
    """A warning ahead of the verdicts when runs of the compared models are flagged not converged (still
    improving within their last `patience` epochs at the cap, or a validation mean far below the same model's
    other seeds': numbers.convergence): a verdict on such a configuration compares under-trained models, not
    the models the paper compares. It names those configurations; the verdicts of the others stand."""
    compared = conv[conv["model"].isin([settings.model, *settings.rivals]) & (conv["not_converged"] > 0)]
    if compared.empty:
        return []
    where = "; ".join(f"{settings.label(m)} on {', '.join(part['config'])}"
                      for m, part in compared.groupby("model", sort=False))
    configs = list(dict.fromkeys(compared["config"]))
    many = len(configs) > 1
    scope = (f"the verdict{'s' if many else ''} on {', '.join(configs)} {'compare' if many else 'compares'} "
             f"under-trained models and {'say' if many else 'says'} nothing yet about the paper's claim there")
    rest = "; the other configurations' verdicts stand" if set(conv["config"]) - set(configs) else ""
    return [f"> **NOT CONVERGED**: {int(compared['not_converged'].sum())} run(s) of the compared models "
            f"({convergence_rule(settings)}: {where}): {scope}{rest}. Train longer or with more seeds before reading "
            "them: raising `runs.study.train.max_epochs` continues the runs at the cap from their checkpoints "
            "(docs/study.md).", ""]


def convergence_rule(settings: StudySettings) -> str:
    """The convergence rule (numbers.convergence) and its thresholds, in words."""
    return (f"still improving within their last {settings.patience} epochs at the epoch cap, or a validation mean "
            f"more than {settings.val_drop:g} % below the median of the same model's other seeds (at least two) on "
            "the configuration, whatever its training loss")


def render_section(metrics: pd.DataFrame, claim: pd.DataFrame, conv: pd.DataFrame, dm_md: str, claims_md: str,
                   settings: StudySettings, header: Sequence[str], figure_prefix: str, *, curves: bool = True,
                   convergence_file: str | None = "convergence.csv") -> str:
    """The section's Markdown; `convergence_file`: where the flagged runs are listed (a study writes its
    convergence.csv beside the section; None: nowhere)."""
    verdicts = claim.drop_duplicates("config")[["config", "verdict"]]
    counts = verdicts["verdict"].value_counts()
    n_runs = len(metrics.drop_duplicates(["config", "model", "seed"]))
    seeds = sorted(int(s) for s in metrics["seed"].unique()) if len(metrics) else []
    rows = sorted({int(x) for x in metrics["n_train"].dropna()}) if "n_train" in metrics else []
    capped = int(conv["best_at_cap"].sum()) if len(conv) else 0
    flagged = int(conv["not_converged"].sum()) if len(conv) else 0
    stopped = int(conv["stopped_early"].sum()) if len(conv) else 0
    rivals = ", ".join(settings.label(r) for r in settings.rivals)
    lines = ["## MultiTab-Bench: Figures 5 and 6, and the paper's claim checked", "", *header]
    lines += [
        f"Runs: {n_runs} (seeds {seeds}; training rows per run {rows}). The paper's claim: "
        f"{settings.label(settings.model)}'s Δm is above each of {rivals} on every configuration. Per "
        f"configuration and rival, two one-sided tests over the seeds' Δm at α = {settings.alpha} (Welch's "
        "statistic, min(n) − 1 degrees of freedom), the tests of \"below\" Holm-corrected over the rivals "
        "(docs/study.md, \"The verdict\").", "",
        "**Claim per configuration: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".**", "",
        *_below_budget_note(metrics, settings),
        *_not_converged_warning(conv, settings),
        claims_md, "",
        "Cells: Δm difference (ours − rival, percentage points) (one-sided p-value of ours above the rival / "
        "of ours below it, Holm-adjusted over the rivals). `holds`: significantly above every rival; `does not "
        "hold`: significantly below at least one after the Holm correction; `inconclusive`: neither (or one "
        "seed: no test), whatever the means' order. Each verdict is wrong at most at α under equal models.", "",
        "### Δm (%) vs STL, mean ± SE over seeds", "", dm_md, "",
        f"![Figure 5]({figure_prefix}figure5_delta_m.png)", "",
        f"![Figure 6]({figure_prefix}figure6_delta_m.png)", "",
        figures.error_bar_caption(metrics.groupby(["config", "model"])["seed"].nunique())
        + " (Each seed's Δm is against the STL seed mean.)", "",
        "### Convergence", "",
        *([f"![Learning curves]({figure_prefix}learning_curves.png)", ""] if curves else []),
        f"{stopped} of {n_runs} runs were ended by early stopping; {capped} reached their epoch cap with the best "
        "validation EV at the last epoch; " + f"{flagged} flagged not converged ({convergence_rule(settings)})"
        + (f" — listed in {convergence_file}." if flagged and convergence_file else "."), "",
    ]
    return "\n".join(lines)


def ladder_figure(table: pd.DataFrame, settings: StudySettings) -> Any:
    """One panel per configuration: the gap (MultiTab-Net's Δm minus the best rival's) per arm, SE bars, the
    verdict as the marker (▲ holds, ▼ does not hold, ● inconclusive)."""
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(table["config"]))
    fig, axes = plt.subplots(1, max(len(configs), 1), figsize=(max(5.0 * len(configs), 6.0), 4.2), squeeze=False,
                             layout="constrained")
    markers = {"holds": "^", "does not hold": "v", "inconclusive": "o"}
    for ax, config in zip(axes[0], configs):
        part = table[table.config == config].reset_index(drop=True)
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        for i, r in part.iterrows():
            if math.isnan(r["gap"]):
                ax.text(i, 0.0, "missing", rotation=90, ha="center", va="bottom", fontsize=7)
                continue
            ax.errorbar([i], [r["gap"]], yerr=[0.0 if math.isnan(r["gap_se"]) else r["gap_se"]],
                        fmt=markers.get(r["verdict"], "s"), color="C0", capsize=3)
        ax.plot(range(len(part)), part["gap"].to_numpy(), color="C0", linewidth=0.8, alpha=0.5)
        ax.set_xticks(range(len(part)), part["arm"].tolist(), rotation=45, ha="right", fontsize=7)
        ax.set_title(config, fontsize=9)
        ax.set_ylabel(f"{settings.label(settings.model)} Δm − best rival's (points)", fontsize=8)
    fig.suptitle("Attribution ladder: ± SE; ▲ holds, ▼ does not hold, ● inconclusive (α "
                 f"{settings.alpha})", fontsize=9)
    return fig
