"""What the quantile transform can give its training rows (multitab.validation.normal_bounds): the mean and standard
deviation of its output lie within the bounds for any number of rows, quantiles and ties, the bounds are tight on
large splits (where validation.processed's range stands) and reject what no such map gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from multitab.config.data import PreprocessConfig
from multitab.datasets.preprocess import fit_features, n_quantiles
from multitab.validation.normal_bounds import quantile_output_bounds


def _column(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "normal":
        return rng.normal(size=n)
    if shape == "lognormal":
        return rng.lognormal(sigma=2.0, size=n)
    if shape == "seven_values":  # the issue's: most rows 0 or 1
        return rng.choice([0, 1, 1.5, 2.5, 4.5, 9.5, 19.5], size=n, p=[0.5, 0.3, 0.08, 0.05, 0.03, 0.02, 0.02])
    return (rng.random(n) < 0.1).astype(float)  # "rare_ones": a 0/1 column, 10 % ones


@pytest.mark.parametrize("noise", [1e-3, 0.0])  # the recipe's noise breaks ties; without it ties map to one value
@pytest.mark.parametrize("shape", ["normal", "lognormal", "seven_values", "rare_ones"])
def test_the_transform_s_output_on_train_lies_within_the_bounds(shape: str, noise: float) -> None:
    cfg = PreprocessConfig(noise=noise)
    rng = np.random.default_rng(0)
    for n in (12, 20, 80, 300, 3000):
        x = _column(shape, n, rng).astype(np.float32)
        _, (out, _) = fit_features(cfg, pd.DataFrame({"x": x}), ["x"], [])
        y = pd.Series(out[:, 0])  # float32, as the processed file holds it
        (mean_lo, mean_hi), (std_lo, std_hi) = quantile_output_bounds(y.to_numpy(), n_quantiles(n, cfg))
        assert mean_lo <= y.mean() <= mean_hi, (n, y.mean(), mean_lo, mean_hi)
        assert std_lo <= y.std() <= std_hi, (n, y.std(), std_lo, std_hi)  # pandas' (ddof 1), as Great Expectations


def test_on_a_large_split_the_bounds_are_within_the_configured_range() -> None:
    cfg = PreprocessConfig()
    x = np.random.default_rng(1).lognormal(size=30_000).astype(np.float32)
    _, (out, _) = fit_features(cfg, pd.DataFrame({"x": x}), ["x"], [])
    (mean_lo, mean_hi), (std_lo, std_hi) = quantile_output_bounds(out[:, 0], n_quantiles(len(x), cfg))
    assert -0.1 < mean_lo < mean_hi < 0.1 and 0.7 < std_lo < std_hi < 1.3  # params.yaml's range stands


def test_what_no_quantile_map_gives_is_outside_the_bounds() -> None:
    rng = np.random.default_rng(2)
    raw = rng.normal(loc=3.0, scale=2.0, size=80)  # a column left untransformed
    (mean_lo, mean_hi), _ = quantile_output_bounds(raw, 10)
    assert not mean_lo <= raw.mean() <= mean_hi
    _, (out, _) = fit_features(PreprocessConfig(), pd.DataFrame({"x": raw.astype(np.float32)}), ["x"], [])
    scaled = 3.0 * out[:, 0].astype(np.float64)  # the map's output scaled
    (_, _), (_, std_hi) = quantile_output_bounds(scaled, 10)
    assert scaled.std(ddof=1) > std_hi
