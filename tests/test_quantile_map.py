"""quantile_map.py against scikit-learn's QuantileTransformer (normal output) on one column: the same
quantiles from the sorted copy, the same float32 bytes from the transform, on ties, NaN, values outside the
training range and at its ends; quantile_locate.py's knot lookup and both-ways interpolation against np.interp's,
on knots chosen where a table on the float32 bits could go wrong."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.preprocessing import QuantileTransformer

from multitab.datasets.quantile_locate import Knots
from multitab.datasets.quantile_map import NormalQuantileMap, fit_normal_quantiles, normal_quantiles


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


def _interp_both_ways(x: np.ndarray, q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """scikit-learn's `_transform_col` (forward): the mean of np.interp ascending and on the negated knots."""
    return 0.5 * (np.interp(x, q, r) - np.interp(-x, -q[::-1], -r[::-1]))


def _near(q: np.ndarray) -> np.ndarray:
    """Float32 values on, just below and just above each knot (a float64 knot between two float32 included)."""
    on = q.astype(np.float32)
    up, down = np.float32(np.inf), np.float32(-np.inf)
    return np.concatenate([on, np.nextafter(on, up), np.nextafter(on, down),
                           np.nextafter(np.nextafter(on, up), up), np.nextafter(np.nextafter(on, down), down)])


def _knot_sets() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    f32 = np.sort(rng.standard_normal(300).astype(np.float32)).astype(np.float64)
    # a bucket is 2**12 float32 steps: knots on a bucket's first key, its last, and the next bucket's first
    edge = np.array([1 << 30, (1 << 30) + 4095, (1 << 30) + 4096, (1 << 30) + 8191], dtype=np.int32)
    edges = np.concatenate([-edge.view(np.float32)[::-1], edge.view(np.float32)]).astype(np.float64)
    first = (np.array([1 << 18, (1 << 18) + 5, (1 << 18) + 77, (1 << 18) + 78], dtype=np.int32) << 12)
    starts = np.concatenate([-(first - 1).view(np.float32), first.view(np.float32)]).astype(np.float64)
    return {
        "distinct": f32,
        "between float32": (f32[:-1] + f32[1:]) / 2,  # interpolated quantiles, not float32 themselves
        "runs of ties": np.sort(np.repeat(np.round(f32[::10] * 3), 9)),  # several at each end too
        "constant": np.full(50, 2.5),
        "two values": np.array([0.0] * 30 + [1.1] * 70).astype(np.float32).astype(np.float64),
        "signed zeros": np.array([-1.0, -0.0, -0.0, 0.0, 0.0, 1e-45, 1e-40, 3.0]),
        "wide": np.array([-3e38, -1e30, -1e-30, -1.4e-45, 0.0, 1.4e-45, 1e-30, 7.0, 1e30, 3e38]),
        "bucket edges": np.sort(edges),
        # one knot a bucket, a hair past its first value (its nearest float32): that value is below the knot
        "just past bucket starts": np.sort(starts + np.abs(starts) * 1e-12),
        "offset": np.sort(1000.0 + rng.random(200).astype(np.float32)).astype(np.float64),
    }


@pytest.mark.parametrize("name", list(_knot_sets()))
def test_knots_give_np_interp_both_ways_bytes(name: str) -> None:
    q = _knot_sets()[name]
    r = np.linspace(0, 1, num=len(q), endpoint=True)  # QuantileTransformer's references_
    rng = np.random.default_rng(1)
    span = np.float32(min(q[-1] - q[0], 1e38)) if q[-1] > q[0] else np.float32(1.0)
    with np.errstate(over="ignore"):  # beyond float32's range for the widest knots: dropped below
        ends = [np.float32(q[0]) - span, np.float32(q[-1]) + span]
    x = np.concatenate([
        _near(q),
        np.array([-0.0, 0.0, *ends, -3e38, 3e38], dtype=np.float32),
        (q[0] + rng.random(2000) * (q[-1] - q[0])).astype(np.float32),  # between the knots
    ])
    x = x[np.isfinite(x)]
    knots = Knots(q, r)
    assert np.array_equal(knots.locate(x), np.searchsorted(q, x.astype(np.float64), side="right"))
    got = knots.interp_both_ways(x)
    assert got.dtype == np.float64
    assert got.tobytes() == _interp_both_ways(x, q, r).tobytes()


def _train_columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "three values": rng.choice(np.array([0.0, 1.0868, 2.1736], dtype=np.float32), 6000, p=[0.6, 0.3, 0.1]),
        "mostly zeros": np.where(rng.random(6000) < 0.9, 0.0, rng.standard_normal(6000)).astype(np.float32),
        "constant": np.full(6000, -4.25, dtype=np.float32),
        "heavy tails": (rng.standard_normal(6000) ** 5).astype(np.float32),
        "positive skew": rng.lognormal(0.0, 1.0, 6000).astype(np.float32),
    }


@pytest.mark.parametrize("name", list(_train_columns()))
def test_the_map_gives_scikit_learns_bytes_on_ties_knots_and_ends(name: str) -> None:
    train = _train_columns()[name]
    sk = QuantileTransformer(n_quantiles=200, output_distribution="normal", subsample=None, random_state=0)
    sk.fit(train.reshape(-1, 1))
    q = sk.quantiles_[:, 0]
    values = np.concatenate([
        train[:2000],
        _near(q),  # on each quantile, and the float32 steps around it
        np.array([np.nan, -0.0, 0.0, q[0] - 1, q[-1] + 1, -1e30, 1e30, np.nan], dtype=np.float32),
    ])
    want = sk.transform(values.reshape(-1, 1).copy()).astype(np.float32, copy=False)[:, 0]
    got = NormalQuantileMap(sk)(values)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert got[finite].tobytes() == want[finite].tobytes()


def test_knots_refuse_what_np_interp_would_misread() -> None:
    with pytest.raises(ValueError, match="sorted"):
        Knots(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="finite"):
        Knots(np.array([0.0, np.nan]), np.array([0.0, 1.0]))
