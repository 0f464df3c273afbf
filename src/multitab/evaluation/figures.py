"""Figures 5 and 6: Δm (STL-relative) with standard-error bars per MultiTab-Bench configuration.

Matplotlib's Agg backend only (no display). A figure built from any stand-in input carries a "STAND-IN
DATA" watermark and title; a missing value is drawn as the word "missing" where its bar would stand.

Shared by the subjects of evaluation/: the default report (paper/report.py) and the MultiTab-Bench study
(bench/study.py) draw their Figures 5-6 and learning curves here, and the sweeps' report (sweep.py) saves
its figures with `save_figure`.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in SVG (searchable, smaller)
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from multitab.evaluation.tables import STANDIN_MARK  # noqa: E402
from multitab.files.io import atomic_path  # noqa: E402
from multitab.registry import REGISTRY  # noqa: E402

# One colour per model in every figure (and in the `dvc plots` templates, .dvc/plots/*.json, which list the same
# colours): a registered model by its name, fixed here (matplotlib's tab10 hues: Figures 5 and 6's MMoE, PLE,
# STEM and MultiTab-Net as they always were); a variant or an arm of a registered model (`MultiTab-Net@rope_off`,
# `MultiTab-Net (A7_inter_sample)`) a lighter or darker shade of its model's colour, picked by its whole name; any
# other name one of tab20b's colours, picked by its name. Stable from figure to figure; within one figure, a name
# whose colour another name already took gets the next free one.
_REGISTERED = {"mmoe": "#1f77b4", "ple": "#ff7f0e", "stem": "#2ca02c", "multitab_net": "#d62728",
               "mtl_shared_bottom": "#9467bd", "tab_transformer": "#8c564b", "ft_transformer": "#e377c2",
               "stl_mlp": "#7f7f7f", "saint": "#bcbd22", "xgboost": "#17becf", "maya": "#393b79"}
MODEL_COLOURS: dict[str, str] = {REGISTRY[name].label: colour for name, colour in _REGISTERED.items()
                                 if name in REGISTRY}
_SHADES = (0.4, -0.35, 0.6, -0.55)  # towards white (+) or black (-)
_OTHERS = tuple(c for c in ("#393b79", "#5254a3", "#6b6ecf", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c",
                            "#8c6d31", "#bd9e39", "#e7ba52", "#e7cb94", "#7b4173", "#a55194", "#ce6dbd", "#de9ed6")
                if c not in MODEL_COLOURS.values())  # tab20b without its reds (MultiTab-Net's hue)
_VARIANT = re.compile(r"^(.+?)(?:@| \()")  # `Label@variant`, `Label (arm)`

GROUP_TITLES = {"correlation": "Task correlation", "complexity": "Task complexity", "count": "Task count",
                "nonuniform": "Non-uniform complexities", "other": "Other configurations"}


def _shade(colour: str, amount: float) -> str:
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    mixed = [c + (255 - c) * amount if amount > 0 else c * (1 + amount) for c in rgb]
    return "#" + "".join(f"{round(c):02x}" for c in mixed)


def _choices(name: str) -> list[str]:
    """The colours `name` may take, the one it takes wherever it is free first (the block above)."""
    if name in MODEL_COLOURS:
        return [MODEL_COLOURS[name], *_OTHERS]
    h = int(hashlib.sha256(name.encode()).hexdigest(), 16)
    base = _VARIANT.match(name)
    if base and base.group(1) in MODEL_COLOURS:
        shades = [_shade(MODEL_COLOURS[base.group(1)], a) for a in _SHADES]
        first = shades[h % len(shades):] + shades[:h % len(shades)]
        return [*first, *_OTHERS]
    return list(_OTHERS[h % len(_OTHERS):] + _OTHERS[:h % len(_OTHERS)])


def model_colour(name: str) -> str:
    """The colour of model label `name` in every figure (where no other name of the figure holds it)."""
    return _choices(name)[0]


def model_colours(names: Sequence[str]) -> dict[str, str]:
    """label -> colour for the models of one figure: each its `model_colour`, or the next free one of its
    choices where an earlier name holds that; registered labels first, so they always keep their own."""
    out: dict[str, str] = {}
    for name in sorted(dict.fromkeys(names), key=lambda n: n not in MODEL_COLOURS):
        out[name] = next((c for c in _choices(name) if c not in out.values()), _choices(name)[0])
    return {name: out[name] for name in dict.fromkeys(names)}


def _bars(ax: Axes, frame: pd.DataFrame, models: Sequence[str]) -> None:
    levels = list(dict.fromkeys(frame["level"]))
    width = 0.8 / max(len(models), 1)
    colours = model_colours(models)
    for i, model in enumerate(models):
        part = frame[frame.model == model].set_index("level")
        for j, level in enumerate(levels):
            x = j - 0.4 + width * (i + 0.5)
            rec = part.loc[level] if level in part.index else None
            if rec is None or bool(rec["missing"]) or math.isnan(float(rec["delta_m"])):
                word = "n/a" if rec is not None and not bool(rec["missing"]) else "missing"
                ax.text(x, 0.0, word, rotation=90, ha="center", va="bottom", fontsize=7, color="0.4")
                continue
            se = float(rec["se"])
            ax.bar(x, float(rec["delta_m"]), width, yerr=None if math.isnan(se) else se, capsize=3,
                   color=colours[model], label=model if j == 0 else None)
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set_xticks(range(len(levels)), levels, fontsize=8)
    ax.set_ylabel("Δm (%)")


def seeds_note(n_seeds: pd.Series) -> str:
    """What a Δm figure's bars rest on: 'n = 3 seeds per bar; error bars: standard error', or, with one
    seed, that there are no error bars (a caption must not promise them)."""
    counts = sorted({int(x) for x in n_seeds if int(x) > 0})
    if not counts:
        return "no runs"
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    if counts[-1] < 2:
        return f"n = {n} seed per bar: no error bars"
    return f"n = {n} seeds per bar; error bars: standard error of the per-seed Δm"


def error_bar_caption(n_seeds: pd.Series) -> str:
    """The report's caption line under a Δm figure, true to what `seeds_note` draws."""
    return seeds_note(n_seeds) + "."


def convergence_note(runs: int, capped: int) -> str:
    """'not converged: 12 of 45 runs still improving at their epoch cap' (or that none was)."""
    if runs == 0:
        return ""
    if capped:
        return f"not converged: {capped} of {runs} runs still improving at their epoch cap"
    return f"converged: none of {runs} runs still improving at its epoch cap"


def delta_m_figure(frame: pd.DataFrame, groups: Sequence[str], models: Sequence[str], title: str,
                   note: str = "") -> Figure:
    """One panel per group present in `frame` (columns as `paper_tables.synthetic_delta_m`), on one shared y-scale
    (a bar reads the same in every panel); the subtitle says n per bar, whether there are error bars, and
    `note` (e.g. how many runs had not converged)."""
    present = [g for g in groups if (frame.group == g).any()]
    n = max(len(present), 1)
    fig, axes = plt.subplots(1, n, figsize=(max(4.2 * n, 7.5), 4.2), squeeze=False, layout="constrained",
                             sharey=True)
    for ax, group in zip(axes[0], present):
        _bars(ax, frame[frame.group == group], models)
        ax.set_title(GROUP_TITLES.get(group, group), fontsize=10)
    if not present:
        axes[0][0].text(0.5, 0.5, "missing: no MultiTab-Bench configuration\nof these groups was run",
                        ha="center", va="center", transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    standin = bool(frame[frame.group.isin(present)]["standin"].any()) if present else False
    shown = frame[frame.group.isin(present) & ~frame["missing"].astype(bool)]
    subtitle = "; ".join(x for x in (seeds_note(shown["n_seeds"]) if len(shown) else "", note) if x)
    mark_figure(fig, title + (f"\n{subtitle}" if subtitle else ""), standin)
    return fig


def mark_figure(fig: Figure, title: str, standin: bool) -> None:
    """Title, and for stand-in inputs a title suffix plus a diagonal watermark."""
    fig.suptitle(title + (f"\n[{STANDIN_MARK.upper()}]" if standin else ""), fontsize=11,
                 color="firebrick" if standin else "black")
    if standin:
        fig.text(0.5, 0.45, STANDIN_MARK.upper(), fontsize=40, color="firebrick", alpha=0.15,
                 ha="center", va="center", rotation=20)


def save_figure(fig: Figure, folder: str | Path, name: str, dpi: int) -> list[Path]:
    """<folder>/<name>.png and .svg, each written atomically and byte-reproducible: the SVG gets no
    date and a fixed salt for its element ids (matplotlib's defaults differ on every run)."""
    folder = Path(folder)
    paths = []
    for ext in ("png", "svg"):
        path = folder / f"{name}.{ext}"
        with atomic_path(path) as tmp, plt.rc_context({"svg.hashsalt": f"multitab:{name}"}):
            fig.savefig(tmp, format=ext, dpi=dpi, metadata={"Date": None} if ext == "svg" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def curves_figure(curves: dict[str, pd.DataFrame], ylabel: str, title: str, standin: bool) -> Figure:
    """One panel per dataset: a line per model (columns of each frame, index = step)."""
    n = max(len(curves), 1)
    fig, axes = plt.subplots(1, n, figsize=(max(4.2 * n, 7.5), 4.2), squeeze=False, layout="constrained")
    colours = model_colours([str(c) for frame in curves.values() for c in frame.columns])
    for ax, (dataset, frame) in zip(axes[0], curves.items()):
        drawn = False
        for label in frame.columns:
            series = frame[label].dropna()
            if not series.empty:
                ax.plot(series.index + 1, series.to_numpy(), label=label, color=colours[str(label)], linewidth=1.2)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "missing: no learning-curve log", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(dataset, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
    handles: dict[str, Artist] = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(len(handles), 6),
                   fontsize=8)
    mark_figure(fig, title, standin)
    return fig
