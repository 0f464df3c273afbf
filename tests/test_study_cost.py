"""benchmarks/study_cost.py's parts that a GPU session relies on, checked on the CPU: the matrix-product rate
on a named device, the device named in words, and a stage process that cannot start reported with its reason
(the GPU image runs these scripts with packages carried on PYTHONPATH, which the stage process must keep)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from _benchmarks import load_benchmark
from multitab.runtime.provenance import cpu_model, git_commit

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


def test_the_fixed_start_up_is_not_scaled_with_the_rows() -> None:
    """A run of 3 epochs (the first 2 s slower: warm-up) in 10 s of wall time: 5 s of per-row start-up (data,
    test evaluation) scale with the rows, the warm-up and the stage start do not."""
    m = {**study_cost.split_startup(10.0, [3.0, 1.0, 1.0], members=1), "stack_members": 1}
    assert m["seconds_per_epoch"] == 1.0 and m["warmup"] == 2.0 and m["startup_per_row"] == 5.0
    assert study_cost.run_seconds(m, epochs=20, scale=1, stage_start=4.0) == 4 + 2 + 5 + 20
    assert study_cost.run_seconds(m, epochs=20, scale=10, stage_start=4.0) == 4 + 2 + (5 + 20) * 10


def test_a_stack_member_shares_the_stage_start_and_the_stacked_epochs() -> None:
    # a stack of 5 whose epochs took 5, 2, 2 s in all (1, 0.4, 0.4 s per member) in 20 s of wall time
    m = {**study_cost.split_startup(20.0, [1.0, 0.4, 0.4], members=5), "stack_members": 5}
    assert m["seconds_per_epoch"] == pytest.approx(0.4) and m["warmup"] == pytest.approx(0.6)
    assert m["startup_per_row"] == pytest.approx(20 / 5 - 0.4 * 3 - 0.6)
    assert study_cost.run_seconds(m, epochs=10, scale=2, stage_start=5.0) == pytest.approx(
        1 + 0.6 + (2.2 + 10 * 0.4) * 2)


def test_a_stack_runs_its_slowest_members_epochs() -> None:
    """metrics.csv has a row per task: each run counts once; separate runs take the median over the seeds, a
    stack the max."""
    runs = [("c1", "mmoe", s, e) for s, e in ((0, 10), (1, 12), (2, 30))] + [("c1", "stem", s, 8) for s in range(3)]
    metrics = pd.DataFrame([(c, m, s, e, 70_000, task) for c, m, s, e in runs for task in ("y1", "y2")],
                           columns=["config", "model", "seed", "epochs", "n_train", "task"])
    assert study_cost.epochs_per_run(metrics, stacked=False) == {("c1", "mmoe"): 12.0, ("c1", "stem"): 8.0}
    assert study_cost.epochs_per_run(metrics, stacked=True) == {("c1", "mmoe"): 30.0, ("c1", "stem"): 8.0}
    assert study_cost.record_train_rows(metrics, Path("r")) == 70_000
    with pytest.raises(SystemExit, match="one size"):
        study_cost.record_train_rows(metrics.assign(n_train=[70_000] * 11 + [700_000]), Path("r"))


def test_the_epochs_come_from_the_record_at_the_target_size_when_there_is_one() -> None:
    rows = {"small": 70_000, "paper": 700_000}
    assert study_cost.choose_epoch_record(rows, 700_000) == ("paper", True)
    assert study_cost.choose_epoch_record({"small": 70_000}, 700_000) == ("small", False)
    assert study_cost.choose_epoch_record(rows, 7_000_000) == ("paper", False)


def test_the_device_initialisation_is_timed_in_a_fresh_process() -> None:
    assert 0 <= study_cost.device_init_seconds("cpu") < 60


def test_a_record_without_runs_is_refused_before_anything_is_measured(tmp_path) -> None:
    with pytest.raises(SystemExit, match="cannot read its metrics.csv"):
        study_cost.main(["--record", str(tmp_path), "--out", str(tmp_path / "out.json")])
    (tmp_path / "metrics.csv").write_text("config,model,seed,epochs,n_train\np02_pd3_t3,mmoe,0,12,70000\n")
    with pytest.raises(SystemExit, match="no runs of"):
        study_cost.main(["--record", str(tmp_path), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()


def test_a_stack_across_configurations_runs_its_slowest_members_epochs_and_starts_once() -> None:
    """Two configurations of one task count x 3 seeds as one stack of 6 whose epochs took 6, 3, 3 s in all
    (1, 0.5, 0.5 s per member) in 30 s of wall time; the configurations stop after 10 and 14 epochs (each the
    max over its seeds): the stack runs 14 epochs at the whole stack's cost, the stage start and the warm-up
    paid once."""
    m = {**study_cost.split_startup(30.0, [1.0, 0.5, 0.5], members=6), "stack_members": 6}
    assert m["warmup"] == pytest.approx(0.5) and m["startup_per_row"] == pytest.approx(30 / 6 - 0.5 * 3 - 0.5)
    got = study_cost.data_stack_seconds(m, {"a": 10.0, "b": 14.0}, seeds=3, scale=2, stage_start=4.0)
    assert got == pytest.approx(4.0 + 6 * 0.5 + (6 * 3.0 + 14 * 6 * 0.5) * 2)
    with pytest.raises(ValueError, match="stack of 6 members, projecting one of 9"):
        study_cost.data_stack_seconds(m, {"a": 10.0, "b": 14.0, "c": 3.0}, seeds=3, scale=1, stage_start=4.0)
    # a model that cannot stack (measured alone) runs every configuration and seed, each its own epochs
    alone = {**study_cost.split_startup(10.0, [3.0, 1.0, 1.0], members=1), "stack_members": 1}
    assert study_cost.data_stack_seconds(alone, {"a": 10.0, "b": 14.0}, seeds=3, scale=1, stage_start=4.0) == (
        3 * ((4 + 2 + 5 + 10) + (4 + 2 + 5 + 14)))
