"""Δm (Equation 5): a hand-computed example, the published Table 3 reproduced, per-seed pairing, errors."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from multitab.evaluation.delta_m import delta_m, delta_m_per_seed, task_gains, task_gains_per_seed

PUBLISHED = Path(__file__).resolve().parents[1] / "src/multitab/evaluation/paper/published"


def test_hand_computed_mixed_tasks_with_lower_is_better() -> None:
    # click: AUC 0.80 vs 0.75 -> +6.666..%; m_jj: EV 0.45 vs 0.50 -> -10%; m_bb: MSE 0.09 vs 0.10 (lower is
    # better) -> -(0.09 - 0.10) / 0.10 = +10%. Mean: (20/3 - 10 + 10) / 3 = 20/9 %.
    method = {"click": 0.80, "m_jj": 0.45, "m_bb": 0.09}
    base = {"click": 0.75, "m_jj": 0.50, "m_bb": 0.10}
    gains = task_gains(method, base, lower_is_better={"m_bb"})
    assert gains == pytest.approx({"click": 20 / 3, "m_jj": -10.0, "m_bb": 10.0})
    assert delta_m(method, base, lower_is_better={"m_bb"}) == pytest.approx(20 / 9)
    # Without the sign flip the MSE improvement would count as a loss.
    assert delta_m(method, base) == pytest.approx((20 / 3 - 10 - 10) / 3)
    # Scale-free: percent and fractions give the same Δm.
    assert delta_m({k: 100 * v for k, v in method.items()}, {k: 100 * v for k, v in base.items()},
                   lower_is_better={"m_bb"}) == pytest.approx(20 / 9)
    assert delta_m(base, base) == 0.0


def _published_table3() -> pd.DataFrame:
    return pd.read_csv(PUBLISHED / "paper_table3_test_results.csv")


@pytest.mark.parametrize("dataset", ["aliexpress", "acs_income", "higgs"])
def test_published_table3_delta_m_reproduced_to_four_decimals(dataset: str) -> None:
    t3 = _published_table3()
    g = t3[t3.dataset == dataset]
    tasks = g[g.task != "delta_m"].set_index("task")
    printed = g[g.task == "delta_m"].iloc[0]
    labels = [c for c in t3.columns if c not in ("dataset", "task", "metric")]
    assert len(labels) == 10
    for label in labels:
        ours = delta_m(tasks[label].to_dict(), tasks["STL"].to_dict())
        assert f"{ours:.4f}" == f"{float(printed[label]):.4f}", (dataset, label, ours)


def test_per_seed_pairing_mean_and_seed() -> None:
    base = pd.DataFrame({"a": [0.70, 0.72, 0.74], "b": [0.50, 0.50, 0.53]}, index=[0, 1, 2])
    runs = pd.DataFrame({"a": [0.71, 0.75, 0.74], "b": [0.52, 0.49, 0.53]}, index=[0, 1, 2])
    mean_base = base.mean()
    by_mean = delta_m_per_seed(runs, base, pairing="mean")
    by_seed = delta_m_per_seed(runs, base, pairing="seed")
    for s in (0, 1, 2):
        assert by_mean[s] == pytest.approx(delta_m(runs.loc[s].to_dict(), mean_base.to_dict()))
        assert by_seed[s] == pytest.approx(delta_m(runs.loc[s].to_dict(), base.loc[s].to_dict()))
    assert by_seed[2] == 0.0 and by_mean[2] != 0.0
    gains = task_gains_per_seed(runs, base)
    assert gains.loc[1, "a"] == pytest.approx(100 * (0.75 - 0.72) / 0.72)
    assert gains.mean(axis=1).to_dict() == pytest.approx(by_mean.to_dict())
    # The mean of per-seed Δm (mean pairing) equals the headline Δm: Δm is linear in the method's metrics.
    assert by_mean.mean() == pytest.approx(delta_m(runs.mean().to_dict(), mean_base.to_dict()))


def test_errors_name_the_task() -> None:
    with pytest.raises(ValueError, match="'b'"):
        delta_m({"a": 0.5, "b": 0.3}, {"a": 0.5, "b": 0.0})
    with pytest.raises(ValueError, match="missing in method"):
        delta_m({"a": 0.5}, {"a": 0.5, "b": 0.3})
    with pytest.raises(ValueError, match="non-finite"):
        delta_m({"a": math.nan}, {"a": 0.5})
    with pytest.raises(ValueError, match="lower_is_better"):
        delta_m({"a": 0.5}, {"a": 0.5}, lower_is_better={"c"})
    runs = pd.DataFrame({"a": [0.5]}, index=[7])
    with pytest.raises(ValueError, match="seed 7"):
        delta_m_per_seed(runs, pd.DataFrame({"a": [0.5]}, index=[0]), pairing="seed")


_metrics = arrays(float, (4, 3), elements=st.floats(0.05, 1.0))


@settings(max_examples=40, deadline=None)
@given(runs=_metrics, base=_metrics, scale=st.floats(0.1, 100.0))
def test_properties_of_delta_m(runs, base, scale) -> None:  # type: ignore[no-untyped-def]
    runs_f = pd.DataFrame(runs, columns=["a", "b", "c"])
    base_f = pd.DataFrame(base, columns=["a", "b", "c"])
    headline = delta_m(runs_f.mean().to_dict(), base_f.mean().to_dict(), lower_is_better={"c"})
    # mean pairing: the per-seed Δm average to the headline Δm (Δm is linear in the method's metrics)
    per_seed = delta_m_per_seed(runs_f, base_f, lower_is_better={"c"})
    assert per_seed.mean() == pytest.approx(headline, rel=1e-9, abs=1e-9)
    # a common unit change of every metric leaves Δm unchanged; the baseline against itself gives 0
    assert delta_m((scale * runs_f.mean()).to_dict(), (scale * base_f.mean()).to_dict(),
                   lower_is_better={"c"}) == pytest.approx(headline, rel=1e-9, abs=1e-9)
    assert delta_m(base_f.mean().to_dict(), base_f.mean().to_dict()) == 0.0
