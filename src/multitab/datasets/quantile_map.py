"""scikit-learn's QuantileTransformer with a normal output, fit and applied to one column, bit for bit as
scikit-learn gives it, in less CPU time: the map is the largest part of preprocess@D at the paper's sizes.

- fit: the quantiles depend only on the column's values, not on their order, so the fit gets a sorted copy
  (numpy's many-quantile partition is several times slower on unsorted values than a sort); only where no
  subsample is drawn, as a subsample's rows depend on the order. A quantile that is zero may come out as
  -0.0 where scikit-learn's gives +0.0 (or the reverse: which of the equal zeros lands there), which the map
  does not see: it only compares with a knot, subtracts it from a different value (x - 0 and x + 0 are x)
  or from another knot, and returns the knot's reference where x equals it.
- transform: `QuantileTransformer._transform_col` (forward, normal output), whose mean of two `np.interp`
  (ascending, and descending on the negated knots, so that repeated quantiles map to the middle of their
  references) is quantile_locate.py's: each value's knot found once, then np.interp's own arithmetic in
  both directions. `scipy.special.ndtri` where it calls `scipy.stats.norm.ppf`, whose generic machinery
  (argument checks, masks, `* scale + loc`) costs more than the function. For a probability in [0, 1] `ppf`
  gives `ndtri(q) * 1.0 + 0.0`: the same value, but for the sign of a zero, which adding 0.0 here makes the
  same too; outside [0, 1] and for NaN both give NaN.
tests/test_quantile_map.py compares both with scikit-learn's on columns with ties, NaN, values on the
quantiles and outside the training range.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import ndtri
from sklearn.preprocessing import QuantileTransformer
from sklearn.preprocessing._data import BOUNDS_THRESHOLD

from multitab.datasets.quantile_locate import Knots

# scikit-learn's clip of the normal output, so that the inverse transform stays consistent: what the lowest and
# the highest training values map to (about -5.2 and 5.2)
CLIP_MIN = float(stats.norm.ppf(BOUNDS_THRESHOLD - np.spacing(1)))
CLIP_MAX = float(stats.norm.ppf(1 - (BOUNDS_THRESHOLD - np.spacing(1))))


def fit_normal_quantiles(
    values: np.ndarray, *, n_quantiles: int, subsample: int | None, seed: int
) -> QuantileTransformer:
    """`QuantileTransformer(output_distribution="normal", ...).fit(values[:, None])` (`values`: one column)."""
    qt = QuantileTransformer(
        n_quantiles=n_quantiles, output_distribution="normal", subsample=subsample, random_state=seed, copy=False
    )
    if subsample is None or subsample >= len(values):
        values = np.sort(values)
    return qt.fit(values.reshape(-1, 1))


class NormalQuantileMap:
    """`qt.transform(values[:, None])[:, 0]` as float32, for a QuantileTransformer fit on one float32 column
    with output_distribution="normal"; the knots' tables built once, for every block of values."""

    def __init__(self, qt: QuantileTransformer) -> None:
        self.quantiles = np.asarray(qt.quantiles_[:, 0], dtype=np.float64)
        self.knots = Knots(self.quantiles, np.asarray(qt.references_, dtype=np.float64))

    def __call__(self, values: np.ndarray) -> np.ndarray:
        x = np.array(values, dtype=np.float32)  # a copy: the map works in place
        if np.isinf(x).any():  # what scikit-learn's input check says
            raise ValueError("Input X contains infinity or a value too large for dtype('float32').")
        with np.errstate(invalid="ignore"):
            below = x - BOUNDS_THRESHOLD < self.quantiles[0]
            above = x + BOUNDS_THRESHOLD > self.quantiles[-1]
        finite = ~np.isnan(x)
        if bool(finite.all()):  # no NaN: the map on the column itself (the same values, without two copies)
            x[:] = self.knots.interp_both_ways(x)
        else:
            x[finite] = self.knots.interp_both_ways(x[finite])
        x[above] = 1
        x[below] = 0
        with np.errstate(invalid="ignore", divide="ignore"):
            out = ndtri(x)
        out += np.float32(0.0)  # ppf's `+ loc`: a zero of either sign becomes +0.0
        return np.clip(out.astype(np.float64), CLIP_MIN, CLIP_MAX).astype(np.float32)


def normal_quantiles(qt: QuantileTransformer, values: np.ndarray) -> np.ndarray:
    """`qt.transform(values[:, None])[:, 0]` as float32 (NormalQuantileMap, for one block of values)."""
    return NormalQuantileMap(qt)(values)
