"""benchmarks/precision_control.py: an option is rejected only where its paired Δm differences reach beyond a
one-ulp nudge's, with the stated false-rejection rate when it is truly equivalent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _benchmarks import load_benchmark
from multitab.config.train import TrainConfig

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


# ------------------------------------------------------------------------------------------------- the driver
def test_nudge_moves_every_floating_parameter_up_by_one_ulp() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(4, 3), torch.nn.Linear(3, 2))
    net[1].bias.data[0] = 0.0  # one ulp above 0 is the smallest subnormal
    before = [p.detach().clone() for p in net.parameters()]
    precision_control.nudge(net)
    for old, new in zip(before, net.parameters(), strict=True):
        expected = np.nextafter(old.numpy(), np.float32(np.inf))
        assert new.dtype == torch.float32 and np.array_equal(new.detach().numpy(), expected)
        assert (new.detach() > old).all()
    assert net[1].bias[0].item() == np.nextafter(np.float32(0), np.float32(1))


def test_options_are_those_the_code_knows() -> None:
    assert precision_control.parse_options("tf32, bf16,tf32") == ["tf32", "bf16"]
    with pytest.raises(ValueError, match=r"\['fp16'\]; this code knows tf32, bf16"):
        precision_control.parse_options("tf32,fp16")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert ("cuda_graph" in precision_control.known_options()) == ("cuda_graph" in fields)
    assert not precision_control.acts_on("tf32", torch.device("cpu"))
    assert precision_control.acts_on("tf32", torch.device("cuda"))
    assert precision_control.acts_on("bf16", torch.device("cpu"))


def _fake_arm(calls: list[tuple[str, int, str, bool]]) -> Any:
    """train_arm's stand-in: a record whose test EV moves by 1e-6 when nudged and by 1e-2 in bf16."""
    def arm(data_path: Path, dataset: str, model: str, seed: int, config: Any, *, nudged: bool,
            work: Path) -> dict[str, Any]:
        calls.append((model, seed, config.precision, nudged))
        ev = 0.5 + 0.01 * seed + (0.1 if model == "multitab_net" else 0.0) + 1e-6 * nudged
        ev += 0.01 * (config.precision == "bf16") * (model == "multitab_net")
        return {"model": model, "seed": seed, "test": {"y0": ev, "y1": ev / 2}, "precision_effective": config.precision,
                "deterministic": True, "nondeterministic_ops": []}
    return arm


def test_the_record_says_no_effect_on_cpu_rather_than_a_passed_control(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int, str, bool]] = []
    monkeypatch.setattr(precision_control, "train_arm", _fake_arm(calls))
    out = tmp_path / "pc.json"
    assert precision_control.main(["--samples", "600", "--seeds", "5", "--epochs", "1", "--device", "cpu",
                                   "--options", "tf32,bf16", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["options"]["tf32"] == {"effect": "no effect on cpu", "acceptable": None, "p": None, "spread": None}
    bf16 = record["options"]["bf16"]
    assert bf16["effect"] == "trained" and bf16["acceptable"] is False and bf16["p"] == 1 / 32
    assert 0 < bf16["spread"] < 1e-3 < min(bf16["differences"])
    assert {c[2] for c in calls} == {"fp32", "bf16"} and len(calls) == 5 * 3 * 2  # tf32 not trained on CPU
    assert sum(c[3] for c in calls) == 10  # the nudged arm: both models, every seed
    assert {"device", "torch", "commit", "precision", "deterministic", "seeds", "samples"} <= set(record)
    assert record["deterministic"] == {"requested": True, "as_ran": True, "nondeterministic_ops": []}


@pytest.mark.parametrize(("argv", "match"), [
    (["--options", "fp16"], "this code knows"),
    (["--seeds", "3"], "--seeds 3 at --alpha 0.05"),
])
def test_a_bad_invocation_trains_nothing_and_writes_nothing(argv: list[str], match: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, int, str, bool]] = []
    monkeypatch.setattr(precision_control, "train_arm", _fake_arm(calls))
    out = tmp_path / "pc.json"
    assert precision_control.main([*argv, "--device", "cpu", "--out", str(out)]) == 3
    assert match in capsys.readouterr().err and not calls and not out.exists()


@pytest.mark.slow
def test_the_dry_run_trains_every_arm_on_cpu(tmp_path: Path) -> None:
    """The real runs (75-91 s on 2 shared cores): 600 rows, 5 seeds, 1 epoch, fp32 / nudged / bf16 of MultiTab-Net
    and STL; tf32 not trained. The nudge moves Δm by far less than bf16 does (margins, not exact values)."""
    out = tmp_path / "pc.json"
    assert precision_control.main(["--dry-run", "--device", "cpu", "--options", "tf32,bf16", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["options"]["tf32"]["effect"] == "no effect on cpu"
    assert record["samples"] == 600 and record["seeds"] == [0, 1, 2, 3, 4] and record["epochs"] == 1
    assert all(abs(c) < 1e-3 for c in record["control_differences"])
    assert record["options"]["bf16"]["precision_effective"] == ["bf16"]
    assert record["deterministic"]["as_ran"] is True
