"""The paper's Figures 3 and 4: label correlation of MultiTab-Bench datasets as a function of the weight
cosine similarity p, measured on generated datasets and computed exactly (Hermite expansion)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from multitab.config.bench_checks import check_correlation, check_degrees, check_int, validate
from multitab.datasets.bench import generate


def pairwise_correlations(Y: np.ndarray) -> np.ndarray:
    """Pearson correlations of the label columns of Y (n, t), upper triangle in (i, j) order: (t(t-1)/2,)."""
    C = np.corrcoef(Y, rowvar=False)
    i, j = np.triu_indices(Y.shape[1], k=1)
    return np.asarray(C[i, j])


def expected_label_correlation(
    degree_i: int, degree_j: int, correlation: float, noise_i: float = 0.0, noise_j: float = 0.0
) -> float:
    """The exact Pearson correlation of y_i and y_j (population value, no sampling error).

    z_i = w_iᵀx and z_j = w_jᵀx are standard normal with correlation p (unit rows, cosine p). Expanding
    f(z) = Σ_{k=1..PD} z^k in probabilists' Hermite polynomials, f = Σ_m a_m He_m, and using
    E[He_m(z_i) He_n(z_j)] = δ_mn m! p^m (Mehler): cov = Σ_{m>=1} a_m b_m m! p^m, var = Σ_{m>=1} a_m² m! + σ²."""
    degree_i = check_int("degree_i", degree_i, 1)
    degree_j = check_int("degree_j", degree_j, 1)
    p = check_correlation(correlation, 2)
    a = np.polynomial.hermite_e.poly2herme([0.0] + [1.0] * degree_i)
    b = np.polynomial.hermite_e.poly2herme([0.0] + [1.0] * degree_j)
    m = np.arange(max(len(a), len(b)))
    a = np.pad(a, (0, len(m) - len(a)))
    b = np.pad(b, (0, len(m) - len(b)))
    fact = np.array([math.factorial(int(k)) for k in m], dtype=np.float64)
    cov = float(np.sum((a * b * fact * p**m)[1:]))
    var_i = float(np.sum((a * a * fact)[1:])) + noise_i**2
    var_j = float(np.sum((b * b * fact)[1:])) + noise_j**2
    return cov / math.sqrt(var_i * var_j)


def label_correlations(
    degrees: Sequence[int],
    grid: Sequence[float] | np.ndarray,
    *,
    n_datasets: int,
    n_samples: int,
    n_features: int,
    noise: float | Sequence[float],
    seed: int,
) -> np.ndarray:
    """Pairwise label correlations of `n_datasets` independent datasets per correlation in `grid`.

    Each dataset is a full `generate` call (dataset k at grid point g has its own seed), so this measures
    exactly what the generator produces. Returns (len(grid), n_datasets, n_pairs) with pairs in
    `np.triu_indices(t, 1)` order."""
    degrees_ = check_degrees(degrees)
    t = len(degrees_)
    if t < 2:
        raise ValueError(f"degrees={list(degrees_)}: label correlations need at least two tasks")
    n_datasets = check_int("n_datasets", n_datasets, 2)
    seed = check_int("seed", seed, 0)
    for p in grid:
        check_correlation(p, t)
    validate(n_samples, n_features, 0.0, degrees_, noise, seed)
    out = np.empty((len(grid), n_datasets, t * (t - 1) // 2))
    seeds = np.random.SeedSequence(seed).generate_state(len(grid) * n_datasets).reshape(len(grid), n_datasets)
    for g, p in enumerate(grid):
        for k in range(n_datasets):
            _, Y, _ = generate(n_samples, n_features, float(p), degrees_, noise, int(seeds[g, k]))
            out[g, k] = pairwise_correlations(Y)
    return out
