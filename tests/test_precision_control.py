"""benchmarks/precision_control.py: an option is rejected only where its paired Δm differences reach beyond a
one-ulp nudge's, with the stated false-rejection rate when it is truly equivalent."""

from __future__ import annotations

import numpy as np
import pytest

from _benchmarks import load_benchmark

precision_control = load_benchmark("precision_control")


def _simulate(rng: np.random.Generator, reps: int, seeds: int, bias: float) -> tuple[np.ndarray, np.ndarray]:
    """Per repetition and seed: the fp32, nudged and option runs' Δm, each the seed's shared part plus its own
    noise; the option shifted by `bias` points. Returns the control's and the option's paired differences."""
    seed_part = rng.normal(0, 1.0, (reps, seeds, 1))
    fp32, nudged, option = np.moveaxis(seed_part + rng.normal(0, 0.3, (reps, seeds, 3)), -1, 0)
    return nudged - fp32, option + bias - fp32


def test_an_equivalent_option_is_rejected_at_the_stated_rate() -> None:
    """5 seeds, α 0.05: the smallest p is 1/32, so the exact size is 1/32; over 2,000 repetitions (binomial
    standard error 0.004) the rate lies within 0.02 of it and never above α by more than that error."""
    control, option = _simulate(np.random.default_rng(20261128), 2000, 5, bias=0.0)
    rate = np.mean([not precision_control.decide(c, o).acceptable for c, o in zip(control, option)])
    assert abs(rate - 1 / 32) < 0.02
    assert rate <= 0.05 + 0.01


def test_a_clearly_biased_option_is_rejected() -> None:
    control, option = _simulate(np.random.default_rng(7), 200, 5, bias=3.0)
    rate = np.mean([not precision_control.decide(c, o).acceptable for c, o in zip(control, option)])
    assert rate > 0.95
    d = precision_control.decide([0.1, -0.2, 0.05, 0.15, -0.1], [2.0, 2.5, 1.8, 2.2, 3.0])
    assert not d.acceptable and d.p_value == 1 / 32 and d.spread == 0.2 and d.option_max == 3.0


def test_an_option_within_the_nudges_reach_is_acceptable() -> None:
    d = precision_control.decide([0.3, -0.2, 0.25, 0.15, -0.3], [0.1, 0.2, -0.1, 0.05, -0.2])
    assert d.acceptable and d.p_value > 0.5 and d.option_max <= d.spread


@pytest.mark.parametrize(("control", "option", "alpha", "match"), [
    ([0.1, 0.2, 0.3], [1.0, 2.0, 3.0], 0.05, "3 seeds cannot reject anything"),
    ([0.1] * 5, [0.1] * 4, 0.05, "one difference per seed"),
    ([0.1] * 5, [0.1] * 4 + [float("nan")], 0.05, "not finite"),
    ([0.1] * 5, [0.1] * 5, 1.5, "alpha"),
])
def test_a_decision_that_cannot_be_made_says_why(control, option, alpha, match) -> None:
    with pytest.raises(ValueError, match=match):
        precision_control.decide(control, option, alpha)
