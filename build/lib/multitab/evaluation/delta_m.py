"""Multitask gain Δm (the paper's Equation 5; Maninis, Radosavovic and Kokkinos 2019).

    Δm = 1/T Σ_i (-1)^{l_i} (M_{m,i} - M_{b,i}) / M_{b,i}          (reported in percent)

M_{m,i}, M_{b,i}: the metric of method m and of the single-task baseline b (STL) on task i; l_i = 1 where a
lower value is better (MSE), 0 otherwise (AUC, explained variance).

Two uses, as in the paper:
- the headline Δm (Table 3, Table 2, the Δm μ of Tables 5–7) compares the seed-mean metrics of m with the
  seed-mean metrics of STL (`delta_m(mean_m, mean_b)`); fed the published per-task means of Table 3 this
  reproduces the published Δm column to its four decimals (tests/test_aggregate_delta_m.py);
- the per-seed Δm (the σ of Tables 5–7, Figures 5–6's error bars, Tables 8–9's tests) compares each seed of
  m with the STL seed-mean (`pairing="mean"`, the default) or with the STL run of the same seed
  (`pairing="seed"`).
Δm is a ratio of metric differences, so fractions (0.7207) and percent (72.07) give the same value.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Literal

import pandas as pd

Pairing = Literal["mean", "seed"]


class UndefinedDeltaM(ValueError):
    """A baseline metric is 0: the relative change of Equation 5 is undefined."""


def task_gains(
    metrics: Mapping[str, float],
    baseline: Mapping[str, float],
    lower_is_better: Collection[str] = (),
) -> dict[str, float]:
    """Per-task signed relative change (-1)^{l_i} (M_m,i - M_b,i) / M_b,i in percent, in baseline task order.

    Raises ValueError when a task of the baseline is absent from `metrics` (or the reverse), when a value is
    not finite, or when a baseline value is zero (the relative change is undefined)."""
    missing = [t for t in baseline if t not in metrics]
    extra = [t for t in metrics if t not in baseline]
    if missing or extra:
        raise ValueError(
            f"Δm needs the same tasks for method and baseline: missing in method {missing}, "
            f"not in baseline {extra}"
        )
    unknown = [t for t in lower_is_better if t not in baseline]
    if unknown:
        raise ValueError(f"lower_is_better names tasks {unknown} that are not among {list(baseline)}")
    gains = {}
    for task, b in baseline.items():
        m = metrics[task]
        if not (math.isfinite(m) and math.isfinite(b)):
            raise ValueError(f"Δm: task {task!r} has a non-finite value (method {m}, baseline {b})")
        if b == 0:
            raise UndefinedDeltaM(f"Δm: baseline value of task {task!r} is 0; the relative change is undefined")
        sign = -1.0 if task in lower_is_better else 1.0
        gains[task] = 100.0 * sign * (m - b) / b
    return gains


def delta_m(
    metrics: Mapping[str, float],
    baseline: Mapping[str, float],
    lower_is_better: Collection[str] = (),
) -> float:
    """Equation 5 in percent: the mean over tasks of `task_gains`."""
    gains = task_gains(metrics, baseline, lower_is_better)
    if not gains:
        raise ValueError("Δm of zero tasks is undefined")
    return sum(gains.values()) / len(gains)


def _baseline_for_seed(baseline_runs: pd.DataFrame, seed: int, pairing: Pairing) -> pd.Series:
    if pairing == "mean":
        return baseline_runs.mean(axis=0)
    if pairing == "seed":
        if seed not in baseline_runs.index:
            raise ValueError(f"pairing='seed': the baseline has no run for seed {seed}")
        return baseline_runs.loc[seed]
    raise ValueError(f"{pairing=} must be 'mean' or 'seed'")


def task_gains_per_seed(
    runs: pd.DataFrame,
    baseline_runs: pd.DataFrame,
    *,
    pairing: Pairing = "mean",
    lower_is_better: Collection[str] = (),
) -> pd.DataFrame:
    """Per-seed, per-task gains. `runs` / `baseline_runs`: index = seed, columns = tasks (metric values).
    Returns index = seed, columns = the baseline's tasks, values in percent."""
    rows = {}
    for seed, row in runs.iterrows():
        base = _baseline_for_seed(baseline_runs, int(seed), pairing)  # type: ignore[arg-type]
        rows[seed] = task_gains(row.to_dict(), base.to_dict(), lower_is_better)
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(baseline_runs.columns))


def delta_m_per_seed(
    runs: pd.DataFrame,
    baseline_runs: pd.DataFrame,
    *,
    pairing: Pairing = "mean",
    lower_is_better: Collection[str] = (),
) -> pd.Series:
    """Per-seed Δm (percent), index = seed: each seed of `runs` against the baseline (see `pairing`)."""
    gains = task_gains_per_seed(runs, baseline_runs, pairing=pairing, lower_is_better=lower_is_better)
    return gains.mean(axis=1)
