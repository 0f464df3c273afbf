"""The claim's verdict from its per-rival one-sided p-values, with its error rates stated.

The claim (the paper's section "Experiments with MultiTab-Bench"): the claim's model has a higher mean Δm than
each rival. Per rival two one-sided Welch t-tests over the seeds' Δm (significance.t_test_greater with
`equal_var=False`): `p_above` (H1: the model above the rival) and `p_below` (H1: below). At level α:

- `holds` when every rival's `p_above` < α, uncorrected: an intersection-union test. Each rival must be beaten
  at α, so under equal models the chance of a false `holds` is at most that of one test, α.
- `does not hold` when the model is below at least one rival after a Holm correction of the `p_below` over the
  rivals: the family-wise error of the "below" tests is at most α, so a false `does not hold` under equal
  models is at most α too. Without the correction, with k rivals it grows towards 1 − (1 − α)^k.
- `inconclusive` otherwise.

Welch's rather than Student's pooled variance: the models' seed spreads are not alike (in the committed
study records MultiTab-Net's σ of Δm is up to 7.6 times a rival's on the same configuration, 57 times its
variance), and pooling would let the rivals' small spread stand for the model's. The paper's Table 8 uses
Student's test; that table's own code (aggregate's significance) keeps it.

Everything here works on arrays (the last axis: the rivals), so tests/test_bench_verdict.py simulates the rule
over thousands of studies at once.
"""

from __future__ import annotations

import numpy as np

HOLDS, DOES_NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive"


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
