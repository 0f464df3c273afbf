"""benchmarks/compile_cpu.py: eager and compiled training steps from the same weights compute the same loss,
and the script writes its record (with the `aot_eager` backend, which needs no C++ compiler and compiles in
seconds; the benchmark itself uses inductor)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from _benchmarks import load_benchmark
from multitab.datasets.schema import Task
from multitab.training.losses import MultitaskLoss

cc = load_benchmark("compile_cpu")


class TwoHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU())
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(32, 1), "b": torch.nn.Linear(32, 1)})

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.body(x)
        return {k: head(h).squeeze(-1) for k, head in self.heads.items()}


def _steps(seed_compiled: int) -> tuple[object, object]:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    targets = {"a": x[:, 0], "b": x[:, 1] * 2}
    loss_fn = MultitaskLoss([Task("a", "regression", "a"), Task("b", "regression", "b")])
    steps = []
    for seed, compiled in ((0, False), (seed_compiled, True)):
        torch.manual_seed(seed)
        model = TwoHeads()
        forward = torch.compile(model, dynamic=False, backend="aot_eager") if compiled else model
        steps.append(cc.training_step(forward, torch.optim.Adam(model.parameters(), lr=1e-2), loss_fn, (x,), targets))
    return steps[0], steps[1]


def test_same_weights_give_the_same_first_loss_and_the_ratio_is_measured():
    out = cc.compare(*_steps(seed_compiled=0), warmup=1, steps=3)
    assert out["first_loss_rel_diff"] < 1e-6
    assert out["eager_step_seconds"] > 0 and out["compiled_step_seconds"] > 0
    assert out["speedup"] > 0
    if out["speedup"] > 1:  # compiled faster: the compile time pays back after a finite number of steps
        assert out["break_even_steps"] is not None and out["break_even_steps"] >= 0
    elif out["speedup"] < 1:
        assert out["break_even_steps"] is None


def test_different_weights_show_in_the_first_loss():
    """The check can fail: a compiled model from other weights computes another loss."""
    out = cc.compare(*_steps(seed_compiled=1), warmup=0, steps=1)
    assert out["first_loss_rel_diff"] > 1e-3


def test_script_writes_its_record(tmp_path: Path):
    out = tmp_path / "compile.json"
    assert cc.main(["--models", "stl_mlp", "--batch", "256", "--warmup", "0", "--steps", "1",
                    "--backend", "aot_eager", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["backend"] == "aot_eager" and record["batch_size"] == 256 and record["cpu"]
    assert record["models"]["stl_mlp"]["first_loss_rel_diff"] < 1e-5
