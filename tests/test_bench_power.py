"""The seeds that would decide an inconclusive cell (multitab.evaluation.bench.power): simulated under the records'
own rule from the observed means and spreads, stated in the ladder and in the answer per figure."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from multitab.evaluation.bench.attribution import ladder, ladder_markdown
from multitab.evaluation.bench.numbers import StudySettings
from multitab.evaluation.bench.power import MAX_SEEDS, POWER, seeds_needed
from multitab.evaluation.bench.verdict import DOES_NOT_HOLD, HOLDS, one_sided_tests, verdicts

OURS = [-1.0, -0.4, -1.6]  # mean −1.0, SD 0.6
RIVALS = [[0.1, -0.1, 0.0], [0.2, 0.0, 0.1], [0.0, -0.2, -0.1]]  # means 0, 0.1, −0.1, SD 0.1


def _power(n: int, ours, rivals, studies: int = 20_000, seed: int = 99) -> float:
    """The same quantity, simulated independently of the module (other draws, n seeds drawn directly)."""
    rng = np.random.default_rng(seed)
    samples = [np.asarray(s, dtype=float) for s in (ours, *rivals)]
    draws = np.stack([rng.normal(s.mean(), s.std(ddof=1), (studies, n)) for s in samples], axis=1)
    _, p_above, p_below = one_sided_tests(draws[:, :1], draws[:, 1:])
    got = verdicts(p_above, p_below, 0.05)
    return float(np.mean((got == HOLDS) | (got == DOES_NOT_HOLD)))


def test_the_seeds_needed_are_the_fewest_whose_simulated_power_reaches_80_percent():
    needed = seeds_needed(OURS, RIVALS, 0.05)
    assert needed is not None and needed.decides_as == DOES_NOT_HOLD and 3 < needed.seeds < MAX_SEEDS
    # an independent simulation agrees: below 80 % one seed short of it, at or above it there (Monte Carlo error
    # of 20,000 studies is 0.3 points; the module's 2,000 studies allow some 2 points more)
    assert _power(needed.seeds - 1, OURS, RIVALS) < POWER + 0.03
    assert _power(needed.seeds, OURS, RIVALS) > POWER - 0.03
    assert math.isclose(needed.power_now, _power(3, OURS, RIVALS), abs_tol=0.03)
    assert seeds_needed(OURS, RIVALS, 0.05) == needed  # the same draws every time: records regenerate exactly
    # a larger gap needs fewer seeds, and one far above every rival decides with the seeds it has
    closer = seeds_needed([x + 0.5 for x in OURS], RIVALS, 0.05)
    assert closer is not None and (closer.seeds is None or closer.seeds > needed.seeds)
    clear = seeds_needed([3.0, 3.1, 2.9], RIVALS, 0.05)
    assert clear is not None and clear.seeds == 3 and clear.decides_as == HOLDS and clear.power_now >= POWER


def test_no_difference_is_not_decided_within_the_cap_and_one_seed_says_nothing():
    same = seeds_needed([0.0, 0.5, -0.5], [[0.0, 0.5, -0.5]] * 3, 0.05)
    assert same is not None and same.seeds is None and same.text() == f"> {MAX_SEEDS}" and same.power_now < 0.1
    assert seeds_needed([1.0], RIVALS, 0.05) is None
    assert seeds_needed([1.0, 1.0], [[0.0, 0.0]], 0.05) is None  # no spread anywhere: nothing to draw from


def test_the_ladder_states_the_seeds_for_an_inconclusive_cell_only():
    values = {"stl_mlp": [0.0, 0.0, 0.0], "multitab_net": OURS, "mmoe": RIVALS[0], "ple": RIVALS[1],
              "stem": RIVALS[2]}
    rows = []
    for arm, shift in (("A", 0.0), ("B", 4.0)):  # B: MultiTab-Net far above every rival, `holds`
        for model, dm in values.items():
            for seed, v in enumerate(dm):
                ev = 0.8 * (1 + (v + (shift if model == "multitab_net" else 0.0)) / 100)
                rows.append({"arm": arm, "run": f"{model}/{seed}", "config": "c", "groups": "count",
                             "correlation": 0.6, "degrees": "3-3-3", "model": model, "seed": seed, "task": "y1",
                             "test_ev": ev, "val_ev": ev, "best_epoch": 5, "epochs": 10, "max_epochs": 40,
                             "stopped_early": True, "train_seconds": 1.0, "n_train": 700})
    arms = pd.DataFrame({"arm": ["A", "B"], "source": ["ours", "ours"], "changed": ["x=1", "x=2"]})
    table = ladder(pd.DataFrame(rows), arms, StudySettings()).set_index("arm")
    assert table.loc["A", "verdict"] == "inconclusive" and table.loc["B", "verdict"] == "holds"
    expected = seeds_needed(OURS, RIVALS, 0.05)
    assert table.loc["A", "seeds_80"] == expected.text() and table.loc["B", "seeds_80"] == ""
    text = ladder_markdown(table.reset_index(), StudySettings())
    assert f"| {expected.text()}; power now {expected.power_now:.2f} |" in text
    assert "Seeds for 80 % power" in text
