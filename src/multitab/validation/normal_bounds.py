"""What a quantile transform with a normal output can give on its own training rows: the range of their mean and
standard deviation, for that many rows, that many quantiles and those ties.

validate_processed expects a quantile-transformed training column to be roughly standard normal (params.yaml
`validation.processed`: |mean| <= 0.1, std in [0.7, 1.3]). That holds for thousands of rows; on a few hundred, the
transform has 10 quantiles (`max(n_train // 30, 10)`), the lowest and the highest value go to -5.2 and 5.2, and a
value between two quantiles goes to the normal scale linearly in its own value: a column of 80 rows with 7 distinct
values, most of them 0 or 1, comes out at standard deviation 1.3-1.5, correctly. Where a column falls outside the
configured range, validate_processed widens it to this module's: the bounds every assignment the map allows reaches.

The map (scikit-learn's QuantileTransformer, quantile_map.py): the quantiles are the training values at positions
p_j * (n - 1), p_j = j / (q - 1); a value between the quantiles at p_j and p_j+1 maps to a reference in [p_j, p_j+1],
a value equal to several quantiles to one within their references, the lowest training value to 0 and the highest to
1, then to the normal scale (ndtri, clipped at -5.2 and 5.2). In sorted order a row at positions [a, b] (a run of
equal values: ties, or values the float32 output made equal) thus maps into [ndtri(p_lo), ndtri(p_hi)], p_lo the
last reference at or before position a, p_hi the first at or after b. The mean of the rows lies between the means
of those lower and upper ends; their mean square between the means of the smallest and largest squares within each
row's interval, and the variance between the least mean square less the largest squared mean and the largest mean
square less the least squared mean. Standard deviations are the sample's (ddof 1), as Great Expectations computes.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from multitab.datasets.quantile_map import CLIP_MAX, CLIP_MIN

# float32 outputs: a mean or standard deviation computed from them may differ from the float64 bound by rounding
_SLACK = 1e-5


def quantile_output_bounds(values: np.ndarray, n_quantiles: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((lowest, highest) mean, (lowest, highest) standard deviation) that a normal-output quantile map with
    `n_quantiles` quantiles, fit on the rows of `values` (its output on them; NaN ignored), can give them."""
    y = np.sort(np.asarray(values, dtype=np.float64))
    y = y[~np.isnan(y)]
    n = len(y)
    if n < 2:
        return (CLIP_MIN, CLIP_MAX), (0.0, math.inf)
    q = max(2, min(n_quantiles, n))  # scikit-learn fits at most one quantile per row
    refs = np.linspace(0.0, 1.0, q)
    positions = refs * (n - 1)
    starts = np.flatnonzero(np.r_[True, y[1:] != y[:-1]])
    ends = np.r_[starts[1:], n] - 1
    p_lo = refs[np.searchsorted(positions, starts, side="right") - 1]
    p_hi = refs[np.minimum(np.searchsorted(positions, ends, side="left"), q - 1)]
    p_lo[starts == 0], p_hi[starts == 0] = 0.0, 0.0  # the lowest training value: reference 0
    p_lo[ends == n - 1], p_hi[ends == n - 1] = 1.0, 1.0  # the highest: 1
    lo, hi = (np.clip(ndtri(p), CLIP_MIN, CLIP_MAX) for p in (p_lo, p_hi))
    width = (ends - starts + 1).astype(np.float64)
    mean_lo, mean_hi = float(width @ lo) / n, float(width @ hi) / n
    sq_hi = float(width @ np.maximum(lo**2, hi**2)) / n
    sq_lo = float(width @ np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo**2, hi**2))) / n
    m2_min = 0.0 if mean_lo <= 0 <= mean_hi else min(mean_lo**2, mean_hi**2)
    m2_max = max(mean_lo**2, mean_hi**2)
    ddof = math.sqrt(n / (n - 1))
    std_lo = ddof * math.sqrt(max(sq_lo - m2_max, 0.0))
    std_hi = ddof * math.sqrt(max(sq_hi - m2_min, 0.0))
    return ((mean_lo - _SLACK, mean_hi + _SLACK),
            (max(std_lo * (1 - _SLACK) - _SLACK, 0.0), std_hi * (1 + _SLACK) + _SLACK))
