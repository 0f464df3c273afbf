"""Stacked members on their own data of one shape (multitab.training.stacked_data): each member trains on
its own dataset's training rows, validates and tests on its own splits, and equals its separate run within
tests/test_training_stacked.py's tolerances (the reasons are stated there)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from _training_tiny import train_run, write_tiny_processed
from multitab.config.train import TrainConfig
from multitab.models import build_model
from multitab.runs.resolve import settings_for as run_config
from multitab.training import checkpoint as ckpt
from multitab.training import loop as loop_mod
from multitab.training import stacked as stacked_mod
from multitab.training.data import load_processed
from multitab.training.run import RunSpec
from multitab.training.stacked import StackMember, run_training_stacked, seeded, train_stacked
from multitab.training.stacked_data import stack_data
from test_training_stacked import (
    BATCH_NORM,
    bench_hparams,
    mismatches,
    run_settings,
    same_checkpoint_format,
    separate,
    settings_for,
)

torch.set_num_threads(1)

FEATURES = [{"name": f"x{i}", "kind": "numerical", "cardinality": None} for i in range(32)]
TASKS = [{"name": f"y{i}", "type": "regression", "n_classes": None} for i in range(3)]


def write_bench(path: Path, *, seed: int, n: dict[str, int] | None = None, features: list[dict[str, Any]] = FEATURES,
                tasks: list[dict[str, Any]] = TASKS) -> Path:
    write_tiny_processed(path, features=features, tasks=tasks, seed=seed,
                         n=n or {"train": 384, "val": 128, "test": 128})
    return path


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MultiTab-Bench shaped, tiny: 32 numerical features, 3 regression tasks; 384 / 128 / 128 rows."""
    return write_bench(tmp_path_factory.mktemp("processed") / "bench", seed=0)


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second dataset of `bench`'s shape: other rows, other validation and test sizes."""
    return write_bench(tmp_path_factory.mktemp("processed") / "other", seed=7,
                       n={"train": 384, "val": 96, "test": 160})


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[float]]]:
    """The mean validation metric, scripted: `queue["sep"]` for the separate runs' calls in turn, `queue["stk"]`
    for the stacked run's (members in order within each epoch)."""
    queue: dict[str, list[float]] = {"sep": [], "stk": []}
    monkeypatch.setattr(loop_mod, "mean_metric", lambda metrics: queue["sep"].pop(0))
    monkeypatch.setattr(stacked_mod, "mean_metric", lambda metrics: queue["stk"].pop(0))
    yield queue


def members_on(
    name: str, runs: list[tuple[Path, int]], root: Path, settings: Any
) -> tuple[list[StackMember], list[Any]]:
    """A member per (data folder, seed), built as `run_training` builds it; one ProcessedData per folder."""
    loaded = {path: load_processed(path) for path, _ in runs}
    h = bench_hparams(name)
    members = []
    for path, seed in runs:
        model, rng = seeded(seed, functools.partial(build_model, name, loaded[path].meta, h.model))
        rs = run_settings(name, seed, settings)  # as `separate` fingerprints it
        members.append(StackMember(seed, model, root / f"{path.name}-{seed}", ckpt.fingerprint(rs), rs, rng))
    return members, [loaded[path] for path, _ in runs]


def test_members_on_datasets_of_one_shape_equal_their_separate_runs(bench: Path, other: Path, tmp_path: Path) -> None:
    """Three members: bench seed 0, other seed 0, bench seed 1 (two datasets, one shared by two members)."""
    check_members_on_own_data(bench, other, tmp_path, "cpu")


@pytest.mark.gpu
def test_members_on_datasets_of_one_shape_equal_their_separate_runs_on_cuda(bench: Path, other: Path,
                                                                            tmp_path: Path) -> None:
    """The same on CUDA (`pytest -m gpu`): the stacked datasets on the GPU, each batch gathered there."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    check_members_on_own_data(bench, other, tmp_path, "cuda")


def check_members_on_own_data(bench: Path, other: Path, tmp_path: Path, device: str) -> None:
    name, h = "stl_mlp", bench_hparams("stl_mlp")
    settings = settings_for(h, max_epochs=2, device=device)
    runs = [(bench, 0), (other, 0), (bench, 1)]
    sep = {(p, s): separate(name, h, p, s, tmp_path / "sep" / f"{p.name}-{s}", settings) for p, s in runs}
    members, datas = members_on(name, runs, tmp_path / "stk", settings)
    results = train_stacked(members, datas, settings)
    for (path, seed), result in zip(runs, results):
        ck_a, ck_b = tmp_path / "stk" / f"{path.name}-{seed}", tmp_path / "sep" / f"{path.name}-{seed}"
        assert mismatches(result, sep[path, seed], ck_a, ck_b, BATCH_NORM) == [], (path.name, seed)
    # the check can fail: seed 0 on `other` against seed 0 on `bench` (same initial weights, other rows)
    wrong = mismatches(results[1], sep[bench, 0], tmp_path / "stk" / "other-0", tmp_path / "sep" / "bench-0",
                       BATCH_NORM)
    assert any("train_loss" in m for m in wrong) and any("test " in m for m in wrong)


def test_a_member_on_other_data_stopping_early_leaves_alone(
    bench: Path, other: Path, tmp_path: Path, scripted: dict[str, list[float]]
) -> None:
    """Patience 1: the member on `other` falls at epoch 2 and stops; the one on `bench` runs to 3 epochs."""
    name, h = "mmoe", bench_hparams("mmoe")
    settings = settings_for(h, patience=1, max_epochs=3)
    runs = [(bench, 0), (other, 0)]
    scripted["sep"] = [0.5, 0.6, 0.7] + [0.5, 0.4]
    sep = {r: separate(name, h, r[0], r[1], tmp_path / "sep" / f"{r[0].name}-{r[1]}", settings) for r in runs}
    assert not scripted["sep"]
    scripted["stk"] = [0.5, 0.5, 0.6, 0.4, 0.7]
    sizes: list[int] = []
    real_stack = stacked_mod._Stack

    def recording(*a: Any, **kw: Any) -> Any:
        stack = real_stack(*a, **kw)
        sizes.append(len(stack.members))
        return stack

    members, datas = members_on(name, runs, tmp_path / "stk", settings)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stacked_mod, "_Stack", recording)
        results = train_stacked(members, datas, settings)
    assert not scripted["stk"] and sizes == [2, 1]
    assert [(r.epochs, r.stopped_early) for r in results] == [(3, False), (2, True)]
    for (path, seed), result in zip(runs, results):
        ck_a, ck_b = tmp_path / "stk" / f"{path.name}-{seed}", tmp_path / "sep" / f"{path.name}-{seed}"
        assert mismatches(result, sep[path, seed], ck_a, ck_b, BATCH_NORM) == [], path.name
        same_checkpoint_format(ck_a, ck_b)


def test_data_of_another_shape_is_refused_naming_the_difference(bench: Path, tmp_path: Path) -> None:
    settings = settings_for(bench_hparams("mmoe"), max_epochs=1)
    binary = [*TASKS[:2], {"name": "y2", "type": "binary", "n_classes": None}]
    for folder, kw, match in (("narrow", {"features": FEATURES[:31]}, r"32 vs 31 features"),
                              ("typed", {"tasks": binary}, r"tasks: \('y2', 'regression', None\) vs \('y2', 'binary'"),
                              ("short", {"n": {"train": 320, "val": 128, "test": 128}}, "384 vs 320 training rows")):
        path = write_bench(tmp_path / folder, seed=1, **kw)
        members, datas = members_on("mmoe", [(bench, 0), (path, 0)], tmp_path / "ck", settings)
        with pytest.raises(ValueError, match=f"data differ in shape .*{folder}.*: {match}"):
            train_stacked(members, datas, settings)
        assert not (tmp_path / "ck").exists()  # refused before anything is written


def test_shared_data_is_not_copied_and_other_data_is_stacked_once(bench: Path, other: Path, tmp_path: Path) -> None:
    a, b = load_processed(bench), load_processed(other)
    ptr = a.splits["train"].x_num.data_ptr()
    # a stacked run of seeds on one dataset trains from that dataset's own tensors
    seen: list[int] = []
    real = stacked_mod.Stack.train_epoch

    def spying(self: Any, split: Any, *args: Any) -> Any:
        seen.append(split.x_num.data_ptr())
        return real(self, split, *args)

    settings = settings_for(bench_hparams("mmoe"), max_epochs=1)
    members, _ = members_on("mmoe", [(bench, 0), (bench, 1)], tmp_path, settings)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stacked_mod.Stack, "train_epoch", spying)
        train_stacked(members, [a, a], settings)
    assert seen == [ptr]
    shared = stack_data([a, a, a], torch.device("cpu"))
    assert shared.dataset_of is None and shared.split.x_num.data_ptr() == ptr and shared.split.x_num.dim() == 2
    assert a.splits["train"].x_num.data_ptr() == ptr
    b_rows = b.splits["train"].x_num.clone()
    mixed = stack_data([a, b, a, b, b], torch.device("cpu"))
    assert mixed.dataset_of == [0, 1, 0, 1, 1] and tuple(mixed.split.x_num.shape) == (2, 384, 32)  # per dataset
    # each dataset's own training split is now a view of its slice: held once
    assert b.splits["train"].x_num.data_ptr() == mixed.split.x_num[1].data_ptr()
    assert torch.equal(b.splits["train"].x_num, b_rows) and len(b.splits["val"]) == 96


def test_run_training_stacked_takes_runs_on_other_data_of_one_shape(bench: Path, other: Path, tmp_path: Path) -> None:
    config = TrainConfig(device="cpu", precision="fp32", compile=False, deterministic=True, num_threads=1,
                         batch_size=64, max_epochs=1, max_train_rows=None, patience={"default": 5},
                         xgboost_early_stopping_rounds=5, progress=False)
    h = bench_hparams("stl_mlp")

    def spec(path: Path, folder: str) -> RunSpec:
        return RunSpec(dataset=path.name, model="stl_mlp", seed=0, data_path=path,
                       checkpoint_dir=tmp_path / folder / path.name)

    sep = [train_run(spec(p, "sep"), config, h) for p in (bench, other)]
    stk = run_training_stacked([spec(p, "stk") for p in (bench, other)],
                               run_config(config, h, model="stl_mlp", dataset="bench"))
    assert stk[0][0]["settings"]["data"] != stk[1][0]["settings"]["data"]
    for (ra, ha), (rb, hb) in zip(stk, sep):
        assert ra["settings"] == rb["settings"]  # its own data's fingerprint: interchangeable checkpoints
        assert (ra["dataset"], ra["n_rows"]) == (rb["dataset"], rb["n_rows"])
        for k in ("val", "test", "test_mse"):
            assert ra[k] == pytest.approx(rb[k], rel=1e-2, abs=1e-4)
        assert [r["train_loss"] for r in ha] == pytest.approx([r["train_loss"] for r in hb], rel=1e-5)
    narrow = write_bench(tmp_path / "narrow", seed=1, features=FEATURES[:31])
    with pytest.raises(ValueError, match="32 vs 31 features"):
        run_training_stacked([spec(bench, "x"), spec(narrow, "x")],
                             run_config(config, h, model="stl_mlp", dataset="bench"))
    assert not (tmp_path / "x").exists()


def test_members_and_datasets_must_pair_up(bench: Path, tmp_path: Path) -> None:
    settings = settings_for(bench_hparams("mmoe"), max_epochs=1)
    members, datas = members_on("mmoe", [(bench, 0), (bench, 1)], tmp_path, settings)
    with pytest.raises(ValueError, match="1 datasets for 2 members"):
        train_stacked(members, datas[:1], dataclasses.replace(settings))
