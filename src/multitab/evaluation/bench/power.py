"""How many seeds would decide a cell the record leaves inconclusive: its power, estimated by simulation.

For one configuration (and arm) the claim's model and each rival get their observed Δm mean and standard deviation
over the record's seeds. Studies of n seeds per model are drawn from those (independent normal seeds), and each
is judged by the records' own rule (bench/verdict.py: `one_sided_tests`, then `verdicts` at α). The power at n is
the share of studies that decide, `holds` or `does not hold`; the seeds needed are the fewest n, from the record's
own count up, whose power reaches POWER (80 %), up to MAX_SEEDS. The same standard normal draws serve every n
(common random numbers), so the power grows smoothly with n.

What it assumes: the observed means and spreads are the true ones (with 3 seeds both are rough: one outlying
seed inflates a spread, and the seeds needed with it), seeds are normal, and the models' seeds are independent
(their Δm share the STL baseline's mean, which moves them together a little). It is a planning estimate,
not a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multitab.evaluation.bench.verdict import DOES_NOT_HOLD, HOLDS, one_sided_tests, verdicts

POWER = 0.8
MAX_SEEDS = 50
STUDIES = 2000
RNG_SEED = 0  # the same draws for every cell and every regeneration: a record regenerates byte for byte


@dataclass(frozen=True)
class Needed:
    """The seeds that would decide a cell: `seeds` (None: more than MAX_SEEDS), the verdict most of the deciding
    studies give there (`decides_as`), and the power at the record's own number of seeds (`power_now`)."""

    seeds: int | None
    decides_as: str
    power_now: float

    def text(self) -> str:
        """"7 (does not hold)" or "> 50"."""
        return f"> {MAX_SEEDS}" if self.seeds is None else f"{self.seeds} ({self.decides_as})"


def seeds_needed(model: Sequence[float], rivals: Sequence[Sequence[float]], alpha: float) -> Needed | None:
    """The seeds per model that would decide the claim at POWER, from the model's and the rivals' per-seed Δm;
    None when a sample has fewer than 2 seeds or no spread at all (nothing to simulate from)."""
    samples = [np.asarray(model, dtype=np.float64), *(np.asarray(r, dtype=np.float64) for r in rivals)]
    if not rivals or min(s.size for s in samples) < 2:
        return None
    means = np.array([s.mean() for s in samples])
    sds = np.array([s.std(ddof=1) for s in samples])
    if not np.all(np.isfinite(sds)) or not np.any(sds > 0):
        return None
    now = min(s.size for s in samples)
    z = np.random.default_rng(RNG_SEED).standard_normal((STUDIES, len(samples), MAX_SEEDS))
    draws = means[None, :, None] + sds[None, :, None] * z
    power_now = math.nan
    for n in range(now, MAX_SEEDS + 1):
        _, p_above, p_below = one_sided_tests(draws[:, :1, :n], draws[:, 1:, :n])
        got = verdicts(p_above, p_below, alpha)
        holds, below = float(np.mean(got == HOLDS)), float(np.mean(got == DOES_NOT_HOLD))
        if n == now:
            power_now = holds + below
        if holds + below >= POWER:
            return Needed(n, HOLDS if holds >= below else DOES_NOT_HOLD, power_now)
    return Needed(None, "", power_now)
