"""quantile_map.py against scikit-learn's QuantileTransformer (normal output) on one column: the same
quantiles from the sorted copy, the same float32 bytes from the transform, on ties, NaN, values outside the
training range and at its ends."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.preprocessing import QuantileTransformer

from multitab.datasets.quantile_map import fit_normal_quantiles, normal_quantiles


def _column(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) ** 3).astype(np.float32)
    x[::7] = np.round(x[::7])  # ties: repeated quantiles
    x[::11] = 0.0  # and -0.0 from rounding small negative values
    return x


@pytest.mark.parametrize("subsample", [None, 10**9, 3000])
def test_fit_and_transform_give_scikit_learns_bytes(subsample: int | None) -> None:
    train = _column(20_000, 0)
    sk = QuantileTransformer(n_quantiles=500, output_distribution="normal", subsample=subsample, random_state=4)
    sk.fit(train.reshape(-1, 1))
    ours = fit_normal_quantiles(train, n_quantiles=500, subsample=subsample, seed=4)
    assert np.array_equal(ours.quantiles_, sk.quantiles_)  # equal; a zero's sign may differ (the map's own)

    values = np.concatenate([
        _column(5_000, 1) * np.float32(2),  # beyond train's range on both sides
        train[:3000],
        np.array([np.nan, train.min(), train.max(), -0.0, 0.0, np.nan], dtype=np.float32),
        np.sort(train)[::97],  # every quantile's neighbourhood
    ])
    want = sk.transform(values.reshape(-1, 1).copy()).astype(np.float32, copy=False)[:, 0]
    kept = values.copy()
    got = normal_quantiles(ours, values)
    assert got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert got[finite].tobytes() == want[finite].tobytes()
    assert values.tobytes() == kept.tobytes(), "the input changed"


def test_infinity_is_refused_as_scikit_learn_refuses_it() -> None:
    qt = fit_normal_quantiles(_column(1000, 0), n_quantiles=100, subsample=None, seed=0)
    with pytest.raises(ValueError, match="infinity"):
        normal_quantiles(qt, np.array([0.0, np.inf], dtype=np.float32))
