"""Is a precision option's effect on Δm within what a one-ulp nudge of fp32 already does? The statistics of the
precision control, a pure function.

Per seed s there are three runs on the same data and split: fp32 (the reference), fp32 with its initial weights
nudged by one ulp (the CONTROL: a change that should not matter, so its effect is the run-to-run spread of
fp32 itself on these kernels), and the OPTION (bf16, TF32, compile, ...). Paired differences per seed:

    c_s = Δm(nudged)_s − Δm(fp32)_s        o_s = Δm(option)_s − Δm(fp32)_s

and e_s = |o_s| − |c_s|: how much further from fp32 the option lands than the nudge does, on the same seed.

The rule: the option is ACCEPTABLE unless a one-sided exact sign-flip permutation test of mean(e) > 0 rejects at
level α: p = the share of the 2^n sign patterns ±|e_1|, ..., ±|e_n| whose sum is ≥ the observed sum Σ e_s,
and the option is rejected when p ≤ α.

Error control. Under the hypothesis that the option is equivalent to the nudge (on each seed, given the fp32
run, the option's run and the nudged run are exchangeable: the option changes results no more than one ulp
does), e_s is symmetric about 0 and independent across seeds, so every sign pattern is equally likely and
P(reject) ≤ α exactly, whatever the distribution of the differences and for any n (with ties at the cut-off,
≤). Not a proof of equivalence: with n seeds the smallest attainable p is 2^-n, so n ≥ 5 is needed to reject
at α = 0.05 (at n = 3 nothing can be rejected: `decide` refuses rather than call every option acceptable), and
a small harm is accepted with high probability at n = 5. `spread` reports max |c_s|, the control's reach, for
the reader: an option with max |o_s| ≤ spread is within the nudge's range on every seed.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

MAX_SEEDS = 20  # 2^20 sign patterns: the exact test stays cheap up to here


class Decision(NamedTuple):
    acceptable: bool
    p_value: float  # one-sided exact permutation p of mean(|option| - |control|) > 0
    alpha: float
    spread: float  # max |control difference|: the nudge's reach
    option_max: float  # max |option difference|


def decide(control: list[float] | np.ndarray, option: list[float] | np.ndarray, alpha: float = 0.05) -> Decision:
    """The precision control's verdict from per-seed paired differences (same seed order in both): `control`
    = Δm(fp32 nudged one ulp) − Δm(fp32), `option` = Δm(option) − Δm(fp32). See the module's docstring."""
    c, o = np.abs(np.asarray(control, dtype=float)), np.abs(np.asarray(option, dtype=float))
    if c.shape != o.shape or c.ndim != 1:
        raise ValueError(f"control and option need one difference per seed each, in the same order; got {c.shape} "
                         f"and {o.shape}")
    if not np.isfinite(c).all() or not np.isfinite(o).all():
        raise ValueError("a difference is not finite (NaN or inf): a run failed; rerun it before deciding")
    n = c.size
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if n > MAX_SEEDS:
        raise ValueError(f"{n} seeds: the exact test enumerates 2^n sign patterns; give at most {MAX_SEEDS}")
    if 2.0 ** -n > alpha:
        raise ValueError(f"{n} seeds cannot reject anything at alpha {alpha} (the smallest p is 2^-{n} = "
                         f"{2.0 ** -n:.3g}): give at least {int(np.ceil(-np.log2(alpha)))} seeds")
    e = o - c
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    sums = signs @ np.abs(e)
    observed = e.sum()
    # a relative tolerance so that the observed pattern counts itself despite rounding in the sums
    p = float(np.mean(sums >= observed - 1e-12 * max(1.0, float(np.abs(e).sum()))))
    return Decision(acceptable=p > alpha, p_value=p, alpha=alpha, spread=float(c.max()), option_max=float(o.max()))
