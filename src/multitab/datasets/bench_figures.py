"""The paper's Figures 3 and 4: pairwise Pearson correlation of MultiTab-Bench labels as a function of p.

For every setting (a degree list PD, one degree per task) and every p on a grid from 0 to 1, `n_datasets`
independent datasets of `n_samples` rows are generated with `bench.generate`; the mean and the 2σ band
over datasets (and, for the pooled curves, over the task pairs of each dataset) are tabulated and plotted.

- Figure 3: equal degrees, PD = [k] * t, one panel per task count t; every pair of tasks is exchangeable,
  so a curve pools all pairs of all datasets. The paper's reading: correlation falls as the degree rises,
  and the curves for 2 and 4 tasks coincide.
- Figure 4: different degrees (e.g. PD = [2, 3, 4]); one curve per task pair (Ti-Tj), plus the pooled one.

Tables are wide CSVs: a column `p`, then `<curve>_mean`, `<curve>_std`, `<curve>_lower`, `<curve>_upper`
(mean ∓ 2 std) and `<curve>_exact` (the population correlation, `bench.expected_label_correlation`) for
every curve. The plots draw the exact values dashed: the measured means must sit on them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from multitab.config.bench import LabelCorrelationConfig
from multitab.datasets.label_correlations import expected_label_correlation, label_correlations
from multitab.files.io import atomic_path, write_csv

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

FIGURE3 = "fig3_label_correlations"
FIGURE4 = "fig4_label_correlations"


@dataclass(frozen=True)
class Curve:
    key: str  # column prefix in the table
    label: str  # legend text
    degrees: tuple[int, ...]
    pair: tuple[int, int] | None  # None: pooled over all pairs


def _pd_key(degrees: Sequence[int]) -> str:
    if len(set(degrees)) == 1:
        return f"pd{degrees[0]}_t{len(degrees)}"
    return "pd" + "".join(str(d) for d in degrees)


def _summarise(values: np.ndarray) -> dict[str, np.ndarray]:
    """values: (grid, samples) -> mean, std, mean ∓ 2 std per grid point."""
    mean = values.mean(axis=1)
    std = values.std(axis=1, ddof=1)
    return {"mean": mean, "std": std, "lower": mean - 2 * std, "upper": mean + 2 * std}


def correlation_table(
    cfg: LabelCorrelationConfig, settings: Sequence[Sequence[int]], per_pair: bool
) -> tuple[pd.DataFrame, list[Curve]]:
    """Measure every setting on cfg.grid; one pooled curve per setting, plus one per pair if `per_pair`."""
    grid = cfg.grid
    columns: dict[str, np.ndarray] = {"p": grid}
    curves: list[Curve] = []
    for index, degrees in enumerate(settings):
        degrees = tuple(int(d) for d in degrees)
        # A separate seed per setting: settings share no datasets, so agreement between curves is not an
        # artefact of common random numbers.
        seed = int(np.random.SeedSequence([cfg.seed, index]).generate_state(1)[0])
        values = label_correlations(
            degrees,
            grid,
            n_datasets=cfg.n_datasets,
            n_samples=cfg.n_samples,
            n_features=cfg.n_features,
            noise=cfg.noise,
            seed=seed,
        )  # (grid, datasets, pairs)
        key = _pd_key(degrees)
        label = f"PD = {list(degrees)}"
        pooled = Curve(
            key if not per_pair else f"{key}_all",
            label if not per_pair else f"{label}, all pairs",
            degrees,
            None,
        )
        parts = [(pooled, values.reshape(len(grid), -1))]
        if per_pair:
            iu, ju = np.triu_indices(len(degrees), k=1)
            for col, (i, j) in enumerate(zip(iu, ju)):
                c = Curve(
                    f"{key}_T{i + 1}T{j + 1}",
                    f"T{i + 1}-T{j + 1} (PD {degrees[i]}, {degrees[j]})",
                    degrees,
                    (int(i), int(j)),
                )
                parts.append((c, values[:, :, col]))
        for curve, v in parts:
            for stat, arr in _summarise(v).items():
                columns[f"{curve.key}_{stat}"] = arr
            columns[f"{curve.key}_exact"] = _exact(curve, grid, cfg.noise)
            curves.append(curve)
        logger.info(
            "label correlations %s: mean at p=%s: %s",
            label,
            grid.tolist(),
            np.round(values.mean(axis=(1, 2)), 3).tolist(),
        )
    return pd.DataFrame(columns), curves


def _exact(curve: Curve, grid: np.ndarray, noise: float) -> np.ndarray:
    """Population correlation of the curve (mean over its pairs for a pooled curve)."""
    t = len(curve.degrees)
    pairs = [curve.pair] if curve.pair is not None else list(zip(*np.triu_indices(t, k=1)))
    return np.array(
        [
            np.mean(
                [
                    expected_label_correlation(curve.degrees[i], curve.degrees[j], p, noise, noise)
                    for i, j in pairs
                ]
            )
            for p in grid
        ]
    )


def _subtitle(cfg: LabelCorrelationConfig) -> str:
    return (
        f"{cfg.n_datasets} datasets x {cfg.n_samples:,} samples per point, d = {cfg.n_features}, "
        f"noise {cfg.noise:g}\nsolid: mean, band: ±2σ over datasets, dashed: exact population value"
    )


def _draw(ax: Axes, table: pd.DataFrame, curves: Sequence[Curve]) -> None:
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls=":", label="y = p")
    for curve in curves:
        (line,) = ax.plot(table["p"], table[f"{curve.key}_mean"], marker="o", ms=3, label=curve.label)
        ax.plot(table["p"], table[f"{curve.key}_exact"], color=line.get_color(), lw=0.9, ls="--")
        ax.fill_between(
            table["p"],
            table[f"{curve.key}_lower"],
            table[f"{curve.key}_upper"],
            color=line.get_color(),
            alpha=0.2,
            lw=0,
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.1, 1.05)
    ax.set_xlabel("cosine similarity p of the task weights")
    ax.set_ylabel("Pearson correlation of the labels")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def _save(fig: Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    write_csv(path, table, float_format="%.6g")


def figure3(cfg: LabelCorrelationConfig, figures: Path, tables: Path) -> pd.DataFrame:
    """Figure 3: equal degrees, one panel per task count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [[k] * t for t in cfg.figure3_n_tasks for k in cfg.figure3_degrees]
    table, curves = correlation_table(cfg, settings, per_pair=False)
    fig, axes = plt.subplots(
        1, len(cfg.figure3_n_tasks), figsize=(5 * len(cfg.figure3_n_tasks), 4.8), squeeze=False
    )
    for ax, t in zip(axes[0], cfg.figure3_n_tasks):
        _draw(ax, table, [c for c in curves if len(c.degrees) == t])
        ax.set_title(f"{t} tasks")
    fig.suptitle(f"Figure 3: label correlation, equal degrees\n{_subtitle(cfg)}", fontsize=10)
    fig.tight_layout()
    _save(fig, figures / f"{FIGURE3}.png")
    plt.close(fig)
    _write_csv(table, tables / f"{FIGURE3}.csv")
    return table


def figure4(cfg: LabelCorrelationConfig, figures: Path, tables: Path) -> pd.DataFrame:
    """Figure 4: different degrees per task, one curve per task pair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table, curves = correlation_table(cfg, cfg.figure4_degrees, per_pair=True)
    n = len(cfg.figure4_degrees)
    fig, axes = plt.subplots(1, n, figsize=(max(6.5, 5.5 * n), 4.8), squeeze=False)
    for ax, degrees in zip(axes[0], cfg.figure4_degrees):
        _draw(ax, table, [c for c in curves if c.degrees == tuple(degrees) and c.pair is not None])
        ax.set_title(f"PD = {list(degrees)}")
    fig.suptitle(f"Figure 4: label correlation, different degrees\n{_subtitle(cfg)}", fontsize=10)
    fig.tight_layout()
    _save(fig, figures / f"{FIGURE4}.png")
    plt.close(fig)
    _write_csv(table, tables / f"{FIGURE4}.csv")
    return table


def label_correlation_figures(
    cfg: LabelCorrelationConfig, figures: Path, tables: Path
) -> dict[str, pd.DataFrame]:
    """Both figures: PNGs into `figures`, CSVs into `tables`."""
    return {FIGURE3: figure3(cfg, figures, tables), FIGURE4: figure4(cfg, figures, tables)}
