"""Tables 8-9's tests, written out in significance.py, against scipy.stats on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from multitab.evaluation.significance import t_test_greater, wilcoxon_greater

# Fixed per-seed Δm values (5 seeds), e.g. MultiTab-Net vs a baseline on one dataset.
A = [0.551, 0.812, 0.244, 0.603, 0.498]
B = [0.087, 0.414, -0.253, 0.301, 0.122]
C = [0.101, 0.093, 0.118, 0.108, 0.112, 0.097, 0.121, 0.104, 0.099, 0.115]


@pytest.mark.parametrize("equal_var", [True, False])
@pytest.mark.parametrize(("a", "b"), [(A, B), (B, A), (A, C), (C[:4], B)])
def test_t_test_matches_scipy(a: list[float], b: list[float], equal_var: bool) -> None:
    ours = t_test_greater(a, b, equal_var=equal_var)
    ref = stats.ttest_ind(a, b, equal_var=equal_var, alternative="greater")
    assert ours.statistic == pytest.approx(float(ref.statistic), rel=1e-12)
    assert ours.pvalue == pytest.approx(float(ref.pvalue), rel=1e-10)


def test_t_test_constant_samples_is_nan_and_too_small_raises() -> None:
    assert math.isnan(t_test_greater([1.0, 1.0], [1.0, 1.0]).pvalue)
    with pytest.raises(ValueError, match="at least 2"):
        t_test_greater([1.0], [1.0, 2.0])


RNG = np.random.default_rng(20260101)
PAIRS = {
    "exact_n5": (np.array(A), np.array(B)),
    "exact_n10": (np.array(C), np.array(C[::-1]) + 0.003),
    "exact_n40": (RNG.normal(0.3, 1, 40), RNG.normal(0, 1, 40)),  # Higgs: 8 tasks x 5 seeds
    "normal_n60": (RNG.normal(0.3, 1, 60), RNG.normal(0, 1, 60)),
    "ties_and_zero_n9": (np.array([1, 2, 2, 3, 0, -1, 4, 4, 5.0]), np.array([0, 0, 0, 0, 0, 0, 0, 0, 0.0])),
    "ties_n20": (np.round(RNG.normal(0.2, 1, 20), 1), np.round(RNG.normal(0, 1, 20), 1)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_wilcoxon_matches_scipy(name: str) -> None:
    a, b = PAIRS[name]
    ours = wilcoxon_greater(a, b)
    ref = stats.wilcoxon(a, b, alternative="greater")
    assert ours.statistic == pytest.approx(float(ref.statistic))
    assert ours.pvalue == pytest.approx(float(ref.pvalue), rel=1e-9)


def test_wilcoxon_all_positive_ten_pairs_is_one_in_1024() -> None:
    # ACS Income, Table 9: 2 tasks x 5 seeds, every pair favouring MultiTab-Net -> 1/2^10 = 0.0010 printed.
    result = wilcoxon_greater(np.arange(1.0, 11.0), np.zeros(10))
    assert result.pvalue == pytest.approx(1 / 1024) and result.method == "exact"
    assert f"{result.pvalue:.4f}" == "0.0010"


def test_wilcoxon_degenerate_and_unpaired() -> None:
    assert math.isnan(wilcoxon_greater([1.0, 2.0], [1.0, 2.0]).pvalue)
    with pytest.raises(ValueError, match="pairs"):
        wilcoxon_greater([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        wilcoxon_greater([1.0, math.nan], [1.0, 2.0])
