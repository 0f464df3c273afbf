"""Checks of the MultiTab-Bench generator's arguments: every invalid setting fails here, before any array
is allocated (the generator, the label correlations and the typed `bench` config call them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from multitab.files.yaml_data import short_repr


def check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}={short_repr(value)} must be an integer")
    if value < low:
        raise ValueError(f"{name}={value} must be >= {low}")
    return int(value)


def check_degrees(degrees: Sequence[int]) -> tuple[int, ...]:
    if isinstance(degrees, str | bytes) or not isinstance(degrees, Sequence | np.ndarray):
        raise TypeError(f"degrees={short_repr(degrees)} must be a list of polynomial degrees, one per task")
    if len(degrees) == 0:
        raise ValueError("degrees=[] must list one polynomial degree per task (at least one task)")
    return tuple(check_int(f"degrees[{i}]", d, 1) for i, d in enumerate(degrees))


def check_correlation(correlation: float, n_tasks: int) -> float:
    if isinstance(correlation, bool) or not isinstance(correlation, int | float | np.floating | np.integer):
        raise TypeError(f"correlation={short_repr(correlation)} must be a number")
    p = float(correlation)
    # P = (1 - p) I + p 11ᵀ has eigenvalues 1 + (t - 1) p (once) and 1 - p (t - 1 times): it is positive
    # semidefinite, hence a valid Gram matrix, iff -1/(t - 1) <= p <= 1.
    low = -1.0 / (n_tasks - 1) if n_tasks > 1 else -1.0
    if not (math.isfinite(p) and low - 1e-12 <= p <= 1.0 + 1e-12):
        raise ValueError(
            f"correlation={correlation!r} is outside [{low:.6g}, 1]: with {n_tasks} tasks the matrix with "
            f"ones on the diagonal and p elsewhere is positive semidefinite only for -1/(t-1) <= p <= 1"
        )
    return min(max(p, low), 1.0)


def check_noise(noise: float | Sequence[float], n_tasks: int) -> np.ndarray:
    if isinstance(noise, int | float | np.floating | np.integer) and not isinstance(noise, bool):
        levels = [float(noise)] * n_tasks
    elif isinstance(noise, Sequence | np.ndarray) and not isinstance(noise, str | bytes):
        if len(noise) != n_tasks:
            raise ValueError(f"noise has {len(noise)} levels but there are {n_tasks} tasks (len(degrees))")
        levels = []
        for i, s in enumerate(noise):
            if isinstance(s, bool) or not isinstance(s, int | float | np.floating | np.integer):
                raise TypeError(f"noise[{i}]={short_repr(s)} must be a number")
            levels.append(float(s))
    else:
        raise TypeError(f"noise={short_repr(noise)} must be a number or a list of numbers, one per task")
    for i, s in enumerate(levels):
        if not (math.isfinite(s) and s >= 0.0):
            raise ValueError(
                f"noise level {s!r} of task {i + 1} must be finite and >= 0 (a standard deviation)"
            )
    return np.asarray(levels, dtype=np.float64)


@dataclass(frozen=True)
class Setting:
    n_samples: int
    n_features: int
    correlation: float
    degrees: tuple[int, ...]
    noise: np.ndarray  # (n_tasks,) standard deviations
    seed: int

    @property
    def n_tasks(self) -> int:
        return len(self.degrees)


def validate(
    n_samples: int,
    n_features: int,
    correlation: float,
    degrees: Sequence[int],
    noise: float | Sequence[float],
    seed: int,
) -> Setting:
    n_samples = check_int("n_samples", n_samples, 1)
    n_features = check_int("n_features", n_features, 1)
    degrees_ = check_degrees(degrees)
    t = len(degrees_)
    if t > n_features:
        raise ValueError(
            f"{t} tasks need {t} orthonormal directions, but n_features={n_features} < {t}: "
            "use at least as many features as tasks"
        )
    return Setting(
        n_samples=n_samples,
        n_features=n_features,
        correlation=check_correlation(correlation, t),
        degrees=degrees_,
        noise=check_noise(noise, t),
        seed=check_int("seed", seed, 0),
    )
