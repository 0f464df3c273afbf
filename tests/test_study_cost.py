"""benchmarks/study_cost.py's parts that a GPU session relies on, checked on the CPU: the matrix-product rate
on a named device, the device named in words, and a stage process that cannot start reported with its reason
(the GPU image runs these scripts with packages carried on PYTHONPATH, which the stage process must keep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _benchmarks import load_benchmark
from multitab.provenance import cpu_model, git_commit

study_cost = load_benchmark("study_cost")


def test_matmul_peak_times_every_shape_on_the_named_device() -> None:
    rates = study_cost.matmul_peak("fp32", 1, repeats=1, device="cpu")
    shapes = {f"{m}x{k}x{n}" for m, k, n in study_cost.PEAK_SHAPES}
    assert set(rates) == shapes | {"best"}
    assert all(r > 0 for r in rates.values())
    assert rates["best"] == max(rates[s] for s in shapes)


def test_the_cpu_device_is_named_by_its_model() -> None:
    assert study_cost.device_name("cpu") == cpu_model()


def _project(root, body: str) -> None:
    (root / "stages").mkdir(parents=True)
    (root / "stages" / "__init__.py").write_text("")
    (root / "stages" / "train.py").write_text(body)


def test_the_stage_process_keeps_the_callers_pythonpath(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    carried = tmp_path / "site"
    carried.mkdir()
    (carried / "carried_only.py").write_text("")
    _project(tmp_path / "project", "import carried_only\n")  # importable from the caller's PYTHONPATH alone
    monkeypatch.setattr(study_cost, "ROOT", tmp_path / "project")
    monkeypatch.setenv("PYTHONPATH", str(carried))
    assert study_cost.process_start_seconds() > 0


def test_a_stage_process_that_cannot_start_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    _project(tmp_path, "raise ImportError('no module the stage needs')\n")
    monkeypatch.setattr(study_cost, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="no module the stage needs"):
        study_cost.process_start_seconds()


def test_a_record_outside_a_repository_takes_its_commit_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """On a lent GPU machine the working tree arrives without its git history: the records' commit comes from
    MULTITAB_COMMIT there, and a checkout's own HEAD wins over it."""
    monkeypatch.delenv("MULTITAB_COMMIT", raising=False)
    assert git_commit(tmp_path) == "unknown"
    monkeypatch.setenv("MULTITAB_COMMIT", "0123abc")
    assert git_commit(tmp_path) == "0123abc"
    head = git_commit(Path(__file__).parent)
    assert head != "0123abc" and len(head) == 40
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the machine
    assert git_commit(tmp_path) == "0123abc"
