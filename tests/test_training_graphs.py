"""The training step captured as a CUDA graph (training/graphs.py), on CPU through the capture's stand-in.

`EagerCapture` stores the captured function and calls it on every replay, so the graph path's own work
(static buffers, warm-up steps, the capture, the eager partial batch, the gradients replaced inside the
step, the counts, the optimiser's `capturable` flag across checkpoints) runs here against the plain loop, in
the same process: the two must be equal bit for bit. A real capture needs a GPU (none here).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from _training_tiny import (
    TINY_HPARAMS,
    TinyNet,
    loop_settings,
    register_tiny,
    train_run,
    write_tiny_processed,
)
from multitab.config import ConfigError
from multitab.config.train import TrainConfig
from multitab.hparams import Hparams, load
from multitab.models import build_model
from multitab.training import checkpoint as ckpt
from multitab.training import graphs
from multitab.training import loop as loop_mod
from multitab.training.data import load_processed
from multitab.training.device import seed_everything
from multitab.training.graphs import EagerCapture, GraphedStep
from multitab.training.loop import RunResult
from multitab.training.metrics_record import METRICS_SCHEMA
from multitab.training.run import RunSpec
from multitab.training.settings import RunSettings
from multitab.training.stacked import StackMember, seeded, train_stacked

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"epoch_seconds", "data_seconds", "samples_per_second"}
# 384 training rows in batches of 80: 4 full batches and one of 64 per epoch; 3 epochs: 3 warm-up steps, the
# capture, then replays; the 3 partial batches eager
COUNTS = {"captured": True, "replayed_steps": 9, "warmup_steps": 3, "eager_steps": 3}


class CapturableStandIn(EagerCapture):
    """The stand-in with a CUDA capture's optimiser: `capturable=True` (the fused CPU Adam takes it)."""

    capturable = True


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(graphs.CAPTURES, "cpu", EagerCapture)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "bench"
    features = [{"name": f"x{i}", "kind": "numerical", "cardinality": None} for i in range(8)]
    tasks = [{"name": f"y{i}", "type": "regression", "n_classes": None} for i in range(2)]
    write_tiny_processed(path, features=features, tasks=tasks, n={"train": 384, "val": 64, "test": 64})
    return path


def bench_hparams(name: str) -> Hparams:
    h = load("multitab_bench", name, root=ROOT)
    small: dict[str, Any] = {"d_hidden": (16,), "expert_d_hidden": (16,), "tower_d_hidden": (8,), "n_experts": 2,
                             "d_embedding": 8, "ffn_d_hidden": 16, "head_d_hidden": (8,), "n_blocks": 1}
    return dataclasses.replace(h, model={**h.model, **{k: v for k, v in small.items() if k in h.model}})


def settings(h: Hparams, **kw: Any) -> RunSettings:
    assert h.optim is not None
    base: dict[str, Any] = dict(seed=0, max_epochs=3, patience=5, batch_size=80, device="cpu",
                                optimizer=h.optim["optimizer"], lr=h.optim["lr"], weight_decay=h.optim["weight_decay"])
    return loop_settings(**{**base, **kw})


def separate(name: str, data_path: Path, ck: Path, s: RunSettings) -> RunResult:
    data = load_processed(data_path)
    seed_everything(s.seed, True)
    model = build_model(name, data.meta, bench_hparams(name).model)
    rs = {"model": name, "seed": s.seed}
    return loop_mod.train(model, data, s, checkpoint_dir=ck, run_fingerprint=ckpt.fingerprint(rs), run_settings=rs)


def stacked(name: str, data_path: Path, root: Path, s: RunSettings) -> list[RunResult]:
    data = load_processed(data_path)
    members = []
    for seed in (0, 1):
        model, rng = seeded(seed, lambda: build_model(name, data.meta, bench_hparams(name).model))
        rs = {"model": name, "seed": seed}
        members.append(StackMember(seed, model, root / f"seed{seed}", ckpt.fingerprint(rs), rs, rng))
    return train_stacked(members, data, s)


def numbers(r: RunResult) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    for k in ("train_seconds", "samples_per_second", "cuda_graph"):
        del out[k]
    out["history"] = [{k: v for k, v in row.items() if k not in TIMING} for row in r.history]
    return out


def same_weights(a: Path, b: Path) -> None:
    for name in (ckpt.LAST, ckpt.BEST):
        sa, sb = (torch.load(d / name, weights_only=True) for d in (a, b))
        assert sa["model"].keys() == sb["model"].keys()
        for k in sa["model"]:
            assert torch.equal(sa["model"][k], sb["model"][k]), (name, k)


# -------------------------------------------------------------------------------- the plain loop's equal
@pytest.mark.parametrize("name", ["mmoe", "multitab_net"])  # MMoE: experts of Linear -> BatchNorm -> ReLU
def test_graph_path_equals_the_plain_loop(name: str, bench: Path, tmp_path: Path, standin: None) -> None:
    h = bench_hparams(name)
    plain = separate(name, bench, tmp_path / "plain", settings(h))
    graphed = separate(name, bench, tmp_path / "graph", settings(h, cuda_graph=True))
    assert plain.cuda_graph is None and graphed.cuda_graph == COUNTS
    assert numbers(graphed) == numbers(plain)
    same_weights(tmp_path / "plain", tmp_path / "graph")


@pytest.mark.parametrize("name", ["mmoe", "multitab_net"])
def test_stacked_graph_path_equals_the_stacked_loop(name: str, bench: Path, tmp_path: Path, standin: None) -> None:
    h = bench_hparams(name)
    plain = stacked(name, bench, tmp_path / "plain", settings(h, max_epochs=2))
    graphed = stacked(name, bench, tmp_path / "graph", settings(h, max_epochs=2, cuda_graph=True))
    for p, g in zip(plain, graphed, strict=True):
        assert p.cuda_graph is None
        assert g.cuda_graph == {"captured": True, "replayed_steps": 5, "warmup_steps": 3, "eager_steps": 2}
        assert numbers(g) == numbers(p)
    for seed in (0, 1):
        same_weights(tmp_path / "plain" / f"seed{seed}", tmp_path / "graph" / f"seed{seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["mmoe", "multitab_net"])
def test_the_real_capture_equals_the_uncaptured_run_on_cuda(name: str, bench: Path, tmp_path: Path) -> None:
    """`pytest -m gpu`: torch.cuda.graph itself, separate and stacked, against uncaptured runs on CUDA. The
    same kernels run either way; the margins allow for the optimiser's capturable path rounding otherwise."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    h = bench_hparams(name)
    pairs = [(separate(name, bench, tmp_path / "p", settings(h, device="cuda")),
              separate(name, bench, tmp_path / "g", settings(h, device="cuda", cuda_graph=True)))]
    pairs += list(zip(stacked(name, bench, tmp_path / "ps", settings(h, device="cuda")),
                      stacked(name, bench, tmp_path / "gs", settings(h, device="cuda", cuda_graph=True)), strict=True))
    for plain, graphed in pairs:
        assert graphed.cuda_graph == COUNTS, graphed.cuda_graph
        for rp, rg in zip(plain.history, graphed.history, strict=True):
            assert rg["train_loss"] == pytest.approx(rp["train_loss"], rel=1e-4)
        assert graphed.test == pytest.approx(plain.test, rel=1e-2, abs=1e-4)


def test_replays_read_each_batch_from_the_static_buffers() -> None:
    """A step that kept the first full batch's tensors (instead of the buffers it is copied into) would
    replay that batch: each call must see its own batch, and the last partial one runs eagerly."""
    seen: list[torch.Tensor] = []

    def step(x_num: torch.Tensor, x_cat: torch.Tensor, targets: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        seen.append(x_num.clone())
        return x_num.sum(), {"y": targets["y"].sum() + x_cat.sum()}

    run = GraphedStep(step, EagerCapture(), batch_size=4)
    batches = [torch.full((4, 2), float(i)) for i in range(6)] + [torch.full((2, 2), 6.0)]
    for i, x in enumerate(batches):
        loss, parts = run(x, torch.full((len(x), 1), i), {"y": torch.full((len(x),), 10.0 * i)})
        assert loss.item() == x.sum().item() and parts["y"].item() == 10.0 * i * len(x) + i * len(x)
        assert torch.equal(seen[-1], x)
    assert run.counts == {"replayed_steps": 3, "warmup_steps": 3, "eager_steps": 1}


# --------------------------------------------------------------------------------------------- resume
class Killed(Exception):
    pass


def kill_at(epoch: int, step: int) -> Any:
    def hook(e: int, s: int) -> None:
        if (e, s) == (epoch, step):
            raise Killed

    return hook


@pytest.mark.parametrize("first, then", [(True, False), (False, True)])
def test_checkpoints_resume_across_captured_and_uncaptured_runs(first: bool, then: bool, bench: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(graphs.CAPTURES, "cpu", CapturableStandIn)
    h = bench_hparams("mmoe")
    reference = separate("mmoe", bench, tmp_path / "ref", settings(h))
    ck = tmp_path / "ck"
    with pytest.raises(Killed):
        separate("mmoe", bench, ck, settings(h, cuda_graph=first, on_step=kill_at(1, 2)))
    written = torch.load(ck / ckpt.LAST, weights_only=True)["optimizer"]["param_groups"][0]["capturable"]
    assert written is first
    resumed = separate("mmoe", bench, ck, settings(h, cuda_graph=then))
    assert resumed.resumed_from_epoch == 1
    assert torch.load(ck / ckpt.LAST, weights_only=True)["optimizer"]["param_groups"][0]["capturable"] is then
    assert numbers(resumed) == {**numbers(reference), "resumed_from_epoch": 1}
    same_weights(tmp_path / "ref", ck)


# --------------------------------------------------------------------------------- not captured: why
def test_a_cpu_run_with_cuda_graph_trains_uncaptured_and_records_why(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)
    data = tmp_path / "tiny"
    write_tiny_processed(data, n={"train": 200, "val": 64, "test": 64})
    config: dict[str, Any] = dict(device="auto" if not torch.cuda.is_available() else "cpu", precision="fp32",
                                  compile=False, deterministic=True, num_threads=1, batch_size=64, max_epochs=1,
                                  max_train_rows=None, patience={"default": 5}, xgboost_early_stopping_rounds=5,
                                  progress=False)
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=data, checkpoint_dir=tmp_path / "on")
    record, _ = train_run(spec, TrainConfig(**config, cuda_graph=True), TINY_HPARAMS)
    assert record["cuda_graph"] == "not captured: cpu"
    jsonschema.validate(record, METRICS_SCHEMA)
    off, _ = train_run(dataclasses.replace(spec, checkpoint_dir=tmp_path / "off"), TrainConfig(**config), TINY_HPARAMS)
    assert "cuda_graph" not in off
    assert off["test"] == record["test"]


class WithOwnLoss(TinyNet):
    """A model with its own training objective (as MAYA): its step is not captured."""

    def training_loss(self, x_num: torch.Tensor, x_cat: torch.Tensor, targets: dict[str, torch.Tensor],
                      task_loss_fn: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        outputs = self(x_num, x_cat)
        return sum(task_loss_fn(k, v, targets[k]) for k, v in outputs.items()), outputs  # type: ignore[return-value]


def test_a_model_with_its_own_training_loss_trains_uncaptured_and_records_why(tmp_path: Path, standin: None) -> None:
    data_path = tmp_path / "tiny"
    write_tiny_processed(data_path, n={"train": 200, "val": 64, "test": 64})
    data = load_processed(data_path)
    seed_everything(0, True)
    model = WithOwnLoss(data.meta)
    s = loop_settings(seed=0, max_epochs=1, patience=5, batch_size=64, device="cpu", cuda_graph=True)
    result = loop_mod.train(model, data, s, checkpoint_dir=tmp_path / "ck", run_fingerprint="f")
    assert result.cuda_graph == ("not captured: the model's own training_loss "
                                 "(a replay would skip its per-step Python work)")
    assert graphs.graph_plan(True, torch.device("cpu"), object()).reason == graphs.NOT_TORCH


def test_compile_and_cuda_graph_together_are_refused() -> None:
    config = dict(device="cpu", precision="fp32", compile=True, deterministic=True, num_threads=1, batch_size=64,
                  max_epochs=1, max_train_rows=None, patience={"default": 5}, xgboost_early_stopping_rounds=5,
                  progress=False)
    TrainConfig(**config)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="compile and train.cuda_graph"):
        TrainConfig(**config, cuda_graph=True)  # type: ignore[arg-type]
