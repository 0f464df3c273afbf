"""The result comparison of benchmarks/fault_injection.py: timings may differ, results may not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location(
    "fault_injection", Path(__file__).resolve().parent.parent / "benchmarks" / "fault_injection.py"
)
assert _spec is not None and _spec.loader is not None
fi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fi)


def write_run(root: Path, auc: float, seconds: float, weight: float) -> None:
    run = root / "results" / "runs" / "d" / "m"
    (run / "plots").mkdir(parents=True)
    metrics = {"test": {"click": auc}, "train_seconds": seconds, "samples_per_second": 1 / seconds,
               "resumed_from_epoch": int(seconds)}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "plots" / "epoch_seconds.tsv").write_text(f"step\tepoch_seconds\n0\t{seconds}\n")
    (run / "plots" / "val_mean.tsv").write_text(f"step\tval_mean\n0\t{auc}\n")
    torch.save({"model": {"w": torch.tensor([weight])}, "history": [{"epoch_seconds": seconds}]}, run / "last.pt")


LOCK = {"train@d-m": {"cmd": "python train.py", "outs": [{"path": "results/runs/d/m"}]}}


def test_timings_may_differ(tmp_path: Path) -> None:
    write_run(tmp_path / "a", 0.75, 1.0, 0.5)
    write_run(tmp_path / "b", 0.75, 3.0, 0.5)
    res = fi.compare_results(tmp_path / "a", tmp_path / "b", LOCK, LOCK)
    assert res["same_stages_and_commands"] and res["output_files"] == 4
    assert res["identical"] == 1 and res["equal_apart_from_timings"] == 3 and res["different"] == []


def test_a_different_metric_or_weight_is_caught(tmp_path: Path) -> None:
    write_run(tmp_path / "a", 0.75, 1.0, 0.5)
    write_run(tmp_path / "b", 0.7500001, 1.0, 0.5)
    write_run(tmp_path / "c", 0.75, 1.0, 0.50001)
    res = fi.compare_results(tmp_path / "a", tmp_path / "b", LOCK, LOCK)
    assert sorted(res["different"]) == ["results/runs/d/m/metrics.json", "results/runs/d/m/plots/val_mean.tsv"]
    res = fi.compare_results(tmp_path / "a", tmp_path / "c", LOCK, LOCK)
    assert res["different"] == ["results/runs/d/m/last.pt"]


def test_a_missing_stage_or_changed_command_is_caught(tmp_path: Path) -> None:
    write_run(tmp_path / "a", 0.75, 1.0, 0.5)
    write_run(tmp_path / "b", 0.75, 1.0, 0.5)
    other = {"train@d-m": {**LOCK["train@d-m"], "cmd": "python train.py --fast"}}
    assert not fi.compare_results(tmp_path / "a", tmp_path / "b", LOCK, other)["same_stages_and_commands"]
    assert not fi.compare_results(tmp_path / "a", tmp_path / "b", LOCK, {})["same_stages_and_commands"]
