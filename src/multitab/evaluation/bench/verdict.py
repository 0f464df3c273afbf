"""The claim's verdict from its per-rival one-sided p-values, with its error rates stated.

The claim (the paper's section "Experiments with MultiTab-Bench"): the claim's model has a higher mean Δm than
each rival. Per rival two one-sided tests over the seeds' Δm (`one_sided_tests`): `p_above` (H1: the model above the
rival) and `p_below` (H1: below). At level α:

- `holds` when every rival's `p_above` < α, uncorrected: an intersection-union test. Each rival must be beaten
  at α, so the chance of a false `holds` is at most that of one test, α (its worst case: one rival equal to the
  model, the others far below it).
- `does not hold` when the model is below at least one rival after a Holm correction of the `p_below` over the
  rivals: the family-wise error of the "below" tests is at most α, so a false `does not hold` under equal
  models is at most α too. Without the correction, with k rivals it grows towards 1 − (1 − α)^k.
- `inconclusive` otherwise.

The test: Welch's statistic (each model's own variance: the seed spreads are not alike, MultiTab-Net's σ of Δm
is 0.03 to 7.6 times a rival's on the same configuration in the committed records) against Student's t with
the conservative degrees of freedom min(n_model, n_rival) − 1 (Hsu's answer to the Behrens-Fisher problem)
instead of Welch-Satterthwaite's estimated ones. With 3 seeds the estimated degrees of freedom make the test
liberal when one spread is a small fraction of the other: simulated with equal models and the model's spread
0.1-0.2 times the rivals', Welch's own test gave a false `does not hold` in 6.0-6.1 % and, one rival equal and
the others far below, a false `holds` in 5.5 % of 60,000 studies (5 seeds: up to 5.4 % and 5.1 %). With
min(n) − 1 degrees of freedom the tail of the t distribution bounds the statistic's for every ratio of spreads
(exact as one spread vanishes), at the price of power where the spreads are alike.

tests/test_bench_verdict.py simulates the rule the records use, 20,000 studies per case: 3 rivals, 3 and 5 seeds,
the model's spread 0.03, 0.1, 0.3, 1, 3, 10 and 30 times the rivals', normal and t(3) (heavy-tailed) seeds. The
largest false rates it finds are 5.2 % for `holds` (one rival equal, the others far below: 3 seeds, spread ratio
30, normal) and 5.1 % for `does not hold` (equal models: 5 seeds, ratio 0.03, normal), each within three Monte
Carlo standard errors (0.46 points) of α = 5 %; heavy tails only lower them (at most 4.3 %). The paper's Table 8
uses Student's pooled test; that table's own code (aggregate's significance) keeps it.

Everything here works on arrays (the last axis: the rivals, or the seeds for `one_sided_tests`), so the tests and
the power estimates (bench/power.py) simulate the rule over thousands of studies at once.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

HOLDS, DOES_NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive"


def one_sided_tests(model: np.ndarray, rival: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t, p_above, p_below) of the seeds on the last axis of `model` and `rival` (their leading axes broadcast):
    Welch's statistic, (mean_model − mean_rival) / sqrt(s²_model / n_model + s²_rival / n_rival), against Student's
    t with min(n_model, n_rival) − 1 degrees of freedom (module docstring). NaN where both samples are constant
    (no test); each sample needs at least 2 seeds."""
    x, y = np.asarray(model, dtype=np.float64), np.asarray(rival, dtype=np.float64)
    nx, ny = x.shape[-1], y.shape[-1]
    if min(nx, ny) < 2:
        raise ValueError(f"a one-sided test needs at least 2 seeds per model, got {nx} and {ny}")
    se2 = x.var(axis=-1, ddof=1) / nx + y.var(axis=-1, ddof=1) / ny
    diff = x.mean(axis=-1) - y.mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se2 > 0, diff / np.sqrt(se2), np.nan)
    df = min(nx, ny) - 1.0
    return t, stats.t.sf(t, df), stats.t.sf(-t, df)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values along the last axis (a NaN p, an untestable pair, counts as 1): the i-th smallest
    of k is max over j ≤ i of min(1, (k − j + 1) p_(j)); a hypothesis is rejected at α when its adjusted p < α."""
    p = np.where(np.isnan(p), 1.0, np.asarray(p, dtype=np.float64))
    k = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * np.arange(k, 0, -1)
    adjusted = np.minimum(np.maximum.accumulate(ranked, axis=-1), 1.0)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def verdicts(p_above: np.ndarray, p_below: np.ndarray, alpha: float) -> np.ndarray:
    """The verdict of every study along the leading axes: `holds`, `does not hold` or `inconclusive` (module
    docstring), from (..., rivals) arrays of one-sided p-values; a NaN p is no evidence either way."""
    above = np.asarray(p_above, dtype=np.float64)
    holds = np.all(np.nan_to_num(above, nan=1.0) < alpha, axis=-1)
    below = np.any(holm(np.asarray(p_below, dtype=np.float64)) < alpha, axis=-1)
    return np.where(holds, HOLDS, np.where(below, DOES_NOT_HOLD, INCONCLUSIVE))
