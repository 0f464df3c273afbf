"""The claim's verdict rule (multitab.evaluation.bench.verdict): simulated for the records' own design (3 rivals,
3 and 5 seeds, the claim's model's spread 0.03 to 30 times the rivals', normal and heavy-tailed t(3) seeds), each
verdict is wrong at most at the stated α, within Monte Carlo error; the same check catches Welch's own degrees
of freedom (the rule before) and a rule without the Holm correction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from multitab.evaluation.bench.numbers import StudySettings, claims
from multitab.evaluation.bench.verdict import DOES_NOT_HOLD, HOLDS, holm, one_sided_tests, verdicts

ALPHA = 0.05
STUDIES = 20_000
RATIOS = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)  # the claim's model's seed spread / the rivals'
CASES = [(n, r, tails) for n in (3, 5) for r in RATIOS for tails in ("normal", "t3")]


def _seeds(rng: np.random.Generator, tails: str, shape: tuple[int, ...]) -> np.ndarray:
    """Seed noise of unit standard deviation: normal, or Student's t with 3 degrees of freedom (variance 3)."""
    return rng.normal(size=shape) if tails == "normal" else rng.standard_t(3, size=shape) / math.sqrt(3.0)


def _studies(n_seeds: int, ratio: float, tails: str, seed: int, *, studies: int = STUDIES, rivals: int = 3,
             far_below: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(model's Δm per seed (studies, 1, n), rivals' (studies, rivals, n)): every mean equal, the model's spread
    `ratio` times the rivals'; the last `far_below` rivals' means 100 spreads under the model's."""
    rng = np.random.default_rng(seed)
    ours = ratio * _seeds(rng, tails, (studies, 1, n_seeds))
    theirs = _seeds(rng, tails, (studies, rivals, n_seeds))
    if far_below:
        theirs[:, rivals - far_below:, :] -= 100.0 * max(ratio, 1.0)
    return ours, theirs


def _bound(alpha: float, studies: int = STUDIES) -> float:
    """α plus three Monte Carlo standard errors of a rate α estimated from `studies` draws."""
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / studies)


def _rates(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """(rate of `holds`, rate of `does not hold`) of the records' rule over simulated studies."""
    _, p_above, p_below = one_sided_tests(ours, theirs)
    got = verdicts(p_above, p_below, ALPHA)
    return float(np.mean(got == HOLDS)), float(np.mean(got == DOES_NOT_HOLD))


@pytest.mark.parametrize(("n_seeds", "ratio", "tails"), CASES)
def test_false_does_not_hold_is_at_most_alpha_under_equal_models(n_seeds, ratio, tails):
    """Every model equal: neither verdict is right; `does not hold` (the Holm family of "below" tests) is at its
    least favourable when every rival is equal."""
    holds, below = _rates(*_studies(n_seeds, ratio, tails, seed=CASES.index((n_seeds, ratio, tails))))
    assert below <= _bound(ALPHA), (n_seeds, ratio, tails, below)
    assert holds <= _bound(ALPHA), (n_seeds, ratio, tails, holds)


@pytest.mark.parametrize(("n_seeds", "ratio", "tails"), CASES)
def test_false_holds_is_at_most_alpha_at_its_least_favourable_configuration(n_seeds, ratio, tails):
    """`holds` (an intersection-union test) errs most when one rival equals the model and the others are far
    below it: then it is that one rival's test alone."""
    ours, theirs = _studies(n_seeds, ratio, tails, seed=1000 + CASES.index((n_seeds, ratio, tails)), far_below=2)
    holds, _ = _rates(ours, theirs)
    assert holds <= _bound(ALPHA), (n_seeds, ratio, tails, holds)


def test_the_check_fails_welchs_own_degrees_of_freedom():
    """The rule before this one (Welch-Satterthwaite's estimated degrees of freedom): with 3 seeds and the model's
    spread a tenth of the rivals', a false `does not hold` well above α (more studies, so that the excess is many
    Monte Carlo errors wide)."""
    studies = 60_000
    ours, theirs = _studies(3, 0.1, "normal", seed=7, studies=studies)
    p_above = stats.ttest_ind(ours, theirs, axis=-1, equal_var=False, alternative="greater").pvalue
    p_below = stats.ttest_ind(ours, theirs, axis=-1, equal_var=False, alternative="less").pvalue
    welch = float(np.mean(verdicts(p_above, p_below, ALPHA) == DOES_NOT_HOLD))
    assert welch > _bound(ALPHA, studies) + 0.002
    _, records = _rates(ours, theirs)
    assert records <= _bound(ALPHA, studies)


def test_the_check_fails_a_rule_without_the_holm_correction():
    """`does not hold` on any one-sided p below α, uncorrected: with 3 rivals it is wrong well above α."""
    _, _, p_below = one_sided_tests(*_studies(3, 0.03, "normal", seed=8))
    assert np.mean(np.any(p_below < ALPHA, axis=-1)) > _bound(ALPHA) + 0.02


def test_one_sided_tests_use_welchs_statistic_and_min_n_minus_one_degrees_of_freedom():
    ours, theirs = np.array([0.0, 0.4, -0.4, 0.1]), np.array([0.9, 1.0, 1.1])
    t, above, below = one_sided_tests(ours, theirs)
    welch = stats.ttest_ind(ours, theirs, equal_var=False)
    assert float(t) == pytest.approx(welch.statistic, rel=1e-12)
    assert float(above) == pytest.approx(stats.t.sf(welch.statistic, 2), rel=1e-12)  # min(4, 3) − 1
    assert float(below) == pytest.approx(stats.t.cdf(welch.statistic, 2), rel=1e-12)
    assert welch.pvalue / 2 < float(below)  # more conservative than Welch's own one-sided test
    t, above, below = one_sided_tests(np.ones(3), np.zeros(3))  # no spread at all: no test
    assert math.isnan(float(t)) and math.isnan(float(above)) and math.isnan(float(below))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        one_sided_tests(np.ones(1), np.zeros(3))


def test_holm_adjusts_the_smallest_p_by_k_and_keeps_the_order():
    p = np.array([[0.03, 0.01, 0.04], [0.2, np.nan, 0.001]])
    np.testing.assert_allclose(holm(p), [[0.06, 0.03, 0.06], [0.4, 1.0, 0.003]])


def test_claims_use_the_records_test_and_the_holm_correction():
    """One rival at one-sided p 0.03 below: significant alone, not after Holm over three rivals; the p-values
    are `one_sided_tests`' (Welch's statistic, min(n) − 1 degrees of freedom), not Student's pooled test's."""
    ours = [0.0, 0.4, -0.4]
    rivals = {"mmoe": [0.9, 1.0, 1.1], "ple": [-5.0, 0.0, 5.0], "stem": [-5.0, 0.0, 5.0]}
    dm = pd.DataFrame([{"config": "c", "model": m, "seed": i, "delta_m": v}
                       for m, values in {"multitab_net": ours, **rivals}.items() for i, v in enumerate(values)])
    table = claims(dm, ["c"], StudySettings()).set_index("rival")
    _, _, below = one_sided_tests(np.array(ours), np.array(rivals["mmoe"]))
    assert table.loc["mmoe", "p_below"] == pytest.approx(float(below), rel=1e-12)
    assert below < ALPHA < 3 * below
    assert table.loc["mmoe", "p_below_holm"] == pytest.approx(3 * float(below), rel=1e-9)
    assert table.loc["mmoe", "status"] == "not significant" and table["verdict"].iloc[0] == "inconclusive"
