"""The claim's verdict rule (multitab.evaluation.bench.verdict): simulated under equal models, each verdict is
wrong at most at the stated α, and the same check catches a rule without the Holm correction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from multitab.evaluation.bench.numbers import StudySettings, claims
from multitab.evaluation.bench.verdict import DOES_NOT_HOLD, HOLDS, holm, verdicts

ALPHA = 0.05
STUDIES = 4000


def _simulate(n_seeds: int, n_rivals: int, model_sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(p_above, p_below), (STUDIES, n_rivals), of studies where every model's Δm has the same mean: the claim's
    model with spread `model_sigma`, the rivals with 1; Welch's one-sided tests (scipy's)."""
    rng = np.random.default_rng(seed)
    ours = rng.normal(0.0, model_sigma, (STUDIES, 1, n_seeds))
    theirs = rng.normal(0.0, 1.0, (STUDIES, n_rivals, n_seeds))
    p_above = stats.ttest_ind(ours, theirs, axis=-1, equal_var=False, alternative="greater").pvalue
    p_below = stats.ttest_ind(ours, theirs, axis=-1, equal_var=False, alternative="less").pvalue
    return p_above, p_below


def _bound(alpha: float) -> float:
    """α plus three Monte Carlo standard errors of a rate α estimated from STUDIES draws."""
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / STUDIES)


@pytest.mark.parametrize(("n_seeds", "n_rivals", "model_sigma"), [(3, 3, 1.0), (3, 4, 1.0), (5, 3, 1.0), (3, 3, 5.0)])
def test_each_verdict_is_false_at_most_alpha_under_equal_models(n_seeds, n_rivals, model_sigma):
    p_above, p_below = _simulate(n_seeds, n_rivals, model_sigma, seed=n_seeds * 10 + n_rivals)
    got = verdicts(p_above, p_below, ALPHA)
    assert got.shape == (STUDIES,)
    assert np.mean(got == HOLDS) <= _bound(ALPHA)
    assert np.mean(got == DOES_NOT_HOLD) <= _bound(ALPHA)


def test_the_check_fails_a_rule_without_the_holm_correction():
    """`does not hold` on any one-sided p below α, uncorrected: with 4 rivals it is wrong well above α."""
    _, p_below = _simulate(3, 4, 1.0, seed=7)
    uncorrected = np.any(p_below < ALPHA, axis=-1)
    assert np.mean(uncorrected) > _bound(ALPHA)


def test_holm_adjusts_the_smallest_p_by_k_and_keeps_the_order():
    p = np.array([[0.03, 0.01, 0.04], [0.2, np.nan, 0.001]])
    np.testing.assert_allclose(holm(p), [[0.06, 0.03, 0.06], [0.4, 1.0, 0.003]])


def test_claims_use_welch_and_the_holm_correction():
    """One rival at one-sided p 0.03 below: significant alone, not after Holm over three rivals; Welch's p,
    not Student's, on samples of unequal spread."""
    ours = [0.0, 0.4, -0.4]
    rivals = {"mmoe": [0.9, 1.0, 1.1], "ple": [-5.0, 0.0, 5.0], "stem": [-5.0, 0.0, 5.0]}
    dm = pd.DataFrame([{"config": "c", "model": m, "seed": i, "delta_m": v}
                       for m, values in {"multitab_net": ours, **rivals}.items() for i, v in enumerate(values)])
    table = claims(dm, ["c"], StudySettings()).set_index("rival")
    welch = stats.ttest_ind(rivals["mmoe"], ours, equal_var=False, alternative="greater").pvalue
    assert table.loc["mmoe", "p_below"] == pytest.approx(welch, rel=1e-9)
    assert welch < ALPHA < 3 * welch
    assert table.loc["mmoe", "p_below_holm"] == pytest.approx(3 * welch, rel=1e-9)
    assert table.loc["mmoe", "status"] == "not significant" and table["verdict"].iloc[0] == "inconclusive"
