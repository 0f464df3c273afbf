"""One-sided significance tests of the paper's appendix "Statistical Significance Analysis".

- Table 8: one-sided independent two-sample t-test, H1: mean Δm of MultiTab-Net > mean Δm of a baseline,
  over the per-seed Δm values of one dataset (`t_test_greater`; Student's pooled variance by default, as
  scipy's `ttest_ind`; Welch with `equal_var=False`).
- Table 9: one-sided Wilcoxon signed-rank test, H1: the paired differences (MultiTab-Net − baseline) are
  shifted above 0 (`wilcoxon_greater`), per dataset over the per-task, per-seed gains paired by
  (task, seed), and globally over the per-seed Δm of every dataset paired by (dataset, seed).

Both are written out here (numpy plus the t and normal distributions) rather than wrapped, and
tests/test_aggregate_significance.py checks them against scipy.stats on fixed inputs. The Wilcoxon test
follows scipy's defaults: zero differences are dropped (Wilcoxon's method); without ties or zeros and at most
50 pairs the exact null distribution; with ties or zeros and at most 13 pairs the exact sign-flip
distribution of the rank-sum; otherwise the normal approximation with the tie correction and no continuity
correction.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class TestResult:
    statistic: float
    pvalue: float
    n: int  # sample size (t-test: both samples together; Wilcoxon: non-zero pairs)
    method: str


def _as_sample(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: every value must be finite, got {arr.tolist()}")
    return arr


def t_test_greater(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                   equal_var: bool = True) -> TestResult:
    """One-sided independent t-test of H1: mean(a) > mean(b). NaN p-value when both samples are constant."""
    x, y = _as_sample(a, "a"), _as_sample(b, "b")
    if x.size < 2 or y.size < 2:
        raise ValueError(f"t-test needs at least 2 values per sample, got {x.size} and {y.size}")
    nx, ny = x.size, y.size
    vx, vy = x.var(ddof=1), y.var(ddof=1)
    diff = x.mean() - y.mean()
    if equal_var:
        df = nx + ny - 2.0
        pooled = ((nx - 1) * vx + (ny - 1) * vy) / df
        se = math.sqrt(pooled * (1.0 / nx + 1.0 / ny))
        method = "student"
    else:
        sx, sy = vx / nx, vy / ny
        se = math.sqrt(sx + sy)
        df = (sx + sy) ** 2 / (sx**2 / (nx - 1) + sy**2 / (ny - 1)) if se > 0 else math.nan
        method = "welch"
    if se == 0:
        return TestResult(math.nan, math.nan, nx + ny, method)
    t = diff / se
    return TestResult(float(t), float(stats.t.sf(t, df)), nx + ny, method)


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n of `values` with ties sharing their average rank, and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    sorted_vals = values[order]
    groups = []
    start = 0
    for end in range(1, values.size + 1):
        if end == values.size or sorted_vals[end] != sorted_vals[start]:
            ranks[order[start:end]] = (start + 1 + end) / 2.0
            groups.append(end - start)
            start = end
    return ranks, np.asarray(groups, dtype=np.float64)


def _exact_signed_rank_sf(n: int, w: int) -> float:
    """P(W+ >= w) for n untied ranks 1..n under H0 (every sign equally likely), by counting subsets."""
    max_sum = n * (n + 1) // 2
    counts = np.zeros(max_sum + 1, dtype=np.float64)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return float(counts[max(w, 0):].sum() / 2.0**n)


def wilcoxon_greater(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """One-sided Wilcoxon signed-rank test of H1: the differences a - b are shifted above 0 (pairs in order).

    NaN p-value when every difference is zero."""
    x, y = _as_sample(a, "a"), _as_sample(b, "b")
    if x.size != y.size:
        raise ValueError(f"Wilcoxon test pairs values: got {x.size} and {y.size} values")
    d_all = x - y
    n_total = d_all.size
    d = d_all[d_all != 0]
    n = d.size
    if n == 0:
        return TestResult(math.nan, math.nan, 0, "none")
    ranks, ties = _average_ranks(np.abs(d))
    r_plus = float(ranks[d > 0].sum())
    has_ties = bool(np.any(ties > 1))
    if not has_ties and n == n_total and n_total <= 50:
        return TestResult(r_plus, _exact_signed_rank_sf(n, math.floor(r_plus)), n, "exact")
    if n_total <= 13:
        # Every assignment of signs to the non-zero differences is equally likely under H0.
        tol = 1e-12 * max(1.0, abs(r_plus))
        hits = sum(
            float(np.dot(ranks, signs)) >= r_plus - tol
            for signs in itertools.product((0.0, 1.0), repeat=n)
        )
        return TestResult(r_plus, hits / 2.0**n, n, "sign-flip")
    mean = n * (n + 1) / 4.0
    var = (n * (n + 1) * (2 * n + 1) - float(np.sum(ties**3 - ties)) / 2.0) / 24.0
    z = (r_plus - mean) / math.sqrt(var)
    return TestResult(r_plus, float(stats.norm.sf(z)), n, "normal")
