"""flows.pipeline by memory: stages admitted by their expected peak within `orchestration.memory_budget_gb`,
peaks measured and kept per stage, a stage killed by SIGKILL named as probably out of memory (flows/memory.py).

Toy DVC projects (tests/_toy_dvc.py) under one Prefect test server, as tests/test_pipeline.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from _toy_dvc import ORCHESTRATION, make_project, write_stage
from flows import memory
from flows.pipeline import PipelineFailed, pipeline, read_stage_graph

MB = 10**6


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def _run(root: Path, **kwargs) -> dict:
    try:
        pipeline(root=str(root), **kwargs)
    except PipelineFailed:
        pass
    return json.loads((root / "results" / "pipeline_summary.json").read_text())


def _budget(root: Path, gb: float) -> None:
    params = {"orchestration": {**ORCHESTRATION, "memory_budget_gb": gb}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


# A stage that writes when its command started and ended; `hold` allocates (and touches) that many bytes.
def _timed(name: str, hold: int = 0, extra: str = "") -> dict:
    return write_stage(name, extra=f"""
        import time
        t0 = time.time()
        held = b'x' * {hold}
        {extra}
        time.sleep(1.0)
        pathlib.Path('.times').mkdir(exist_ok=True)
        pathlib.Path('.times/{name}').write_text(f'{{t0}} {{time.time()}}')""")


# A small stage that waits (up to 60 s) until its partner has started: it completes promptly only when both
# run at once, and says which happened.
def _together(name: str, partner: str) -> dict:
    return _timed(name, extra=f"""
        pathlib.Path('.started').mkdir(exist_ok=True); pathlib.Path('.started/{name}').write_text('')
        while not pathlib.Path('.started/{partner}').exists() and time.time() - t0 < 60:
            time.sleep(0.1)
        pathlib.Path('.started/{name}.met').write_text(str(pathlib.Path('.started/{partner}').exists()))""")


def test_stages_whose_peaks_exceed_the_budget_together_run_one_after_the_other(tmp_path, prefect_server):
    """Budget 1 GB. `big_a` and `big_b` each needed 0.6 GB last time (the state file says so): they run one
    after the other. `small_a` and `small_b` (50 MB) run together, beside a big one. Every stage's peak is
    measured again: a stage holding 150 MB is recorded with at least that."""
    stages = {"big_a": _timed("big_a", hold=150 * MB), "big_b": _timed("big_b", hold=150 * MB),
              "small_a": _together("small_a", "small_b"), "small_b": _together("small_b", "small_a")}
    root = make_project(tmp_path / "p", stages)
    _budget(root, 1.0)
    record = root / ORCHESTRATION["stage_memory"]
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"peak_rss_bytes": {"big_a": 600 * MB, "big_b": 600 * MB,
                                                     "small_a": 50 * MB, "small_b": 50 * MB}}))
    summary = _run(root, workers=4, retries=0)
    assert summary["failed"] == [] and sorted(summary["ran"]) == sorted(stages)
    spans = {p.name: tuple(map(float, p.read_text().split())) for p in (root / ".times").iterdir()}
    (a0, a1), (b0, b1) = spans["big_a"], spans["big_b"]
    assert a1 <= b0 or b1 <= a0, f"the two big stages overlapped: {spans}"
    assert (root / ".started" / "small_a.met").read_text() == "True", "the small stages did not run together"
    assert (root / ".started" / "small_b.met").read_text() == "True"
    assert summary["stages"]["big_a"]["expected_peak_bytes"] == 600 * MB
    peaks = memory.read_record(record)
    # Measured again, not the record's 600 MB carried over. No upper bound: the largest process of a stage
    # may be DVC's own, whose resident size depends on the machine (728 MB was seen under CI).
    for name in ("big_a", "big_b"):
        assert 150 * MB <= summary["stages"][name]["peak_rss_bytes"] == peaks[name] != 600 * MB
    assert peaks["small_a"] != 50 * MB


def test_a_stage_killed_by_sigkill_is_named_as_probably_out_of_memory(tmp_path, prefect_server):
    killed = write_stage("killed", extra="""
        import os, signal, sys
        print('[killed] INFO loading 12 GB of tensors', file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)""")
    root = make_project(tmp_path / "p", {"killed": killed})
    summary = _run(root, workers=2, retries=0)
    assert summary["failed"] == ["killed"]
    stage = summary["stages"]["killed"]
    assert stage["exit_code"] in (-9, 137)
    error = stage["error"]
    assert "killed by SIGKILL" in error and "probably out of memory" in error, error
    assert "this machine has" in error and "available now" in error and "2 stage(s) at once" in error
    assert "orchestration.workers" in error and "train.batch_size" in error
    assert "loading 12 GB" not in error  # not the stage's last log line, as a generic failure would say


# ------------------------------------------------------------------------------ without Prefect


def test_admission_fits_the_budget_and_a_stage_bigger_than_it_runs_alone(tmp_path):
    budget = memory.MemoryBudget(tmp_path, Path("peaks.json"), 1000)
    budget.peaks = {"a": 600, "b": 600, "c": 300, "huge": 5000}
    assert budget.try_reserve("a") and not budget.try_reserve("b") and budget.try_reserve("c")
    assert not budget.try_reserve("huge")
    budget.release("a"), budget.release("c")
    assert budget.try_reserve("huge")  # alone
    assert not budget.try_reserve("c")
    budget.release("huge")
    # a retry whose expectation was raised waits for the stages running to end
    assert budget.try_reserve("a")
    budget.peaks["b"] = 700
    started = threading.Event()

    def retry() -> None:
        budget.wait_to_fit("b")
        started.set()

    waiter = threading.Thread(target=retry)
    waiter.start()
    time.sleep(0.3)
    assert not started.is_set()
    budget.release("a")
    assert started.wait(5.0)
    waiter.join()


def test_measured_peaks_are_kept_and_a_failed_attempt_raises_them(tmp_path):
    budget = memory.MemoryBudget(tmp_path, Path("results/peaks.json"), 10**9)
    budget.measure("s", 300, ran=True, failed=False)
    budget.measure("s", 900, ran=False, failed=True)  # killed at 900: it needs at least that
    assert memory.read_record(tmp_path / "results/peaks.json") == {"s": 900}
    budget.measure("s", 400, ran=True, failed=False)  # what it took when it completed
    budget.measure("s", 50, ran=False, failed=False)  # restored from DVC's cache: says nothing
    assert memory.MemoryBudget(tmp_path, Path("results/peaks.json"), 1).expected("s") == 400


def test_a_stage_never_run_here_is_expected_to_hold_its_input_data(tmp_path):
    """The first estimate: the size on disk of what upstream stages produce for it (not its code)."""
    data = write_stage("data", extra="pathlib.Path('big').write_bytes(b'x' * 3_000_000)")
    data["outs"].append("big")
    root = make_project(tmp_path / "p", {"data": data, "train": write_stage("train", ["big", "out/data"])})
    plan = read_stage_graph(root)
    assert plan.inputs == {"train": ("big", "out/data")}
    budget = memory.MemoryBudget(root, Path("peaks.json"), 10**9, plan.inputs)
    assert budget.expected("train") == 0  # not written yet
    (root / "big").write_bytes(b"x" * 3_000_000)
    (root / "out").mkdir()
    (root / "out" / "data").write_text("data\n")
    assert budget.expected("train") == 3_000_005
    assert budget.expected("data") == 0


def test_the_oom_line_says_when_the_kernel_counted_an_out_of_memory_kill(monkeypatch):
    budget = memory.MemoryBudget(Path("."), Path("unused.json"), 8 * 10**9, workers=3)
    monkeypatch.setattr(memory, "oom_kills", lambda: 5)
    line = memory.out_of_memory_line("train@x", -9, 7 * 10**9, 4, budget)
    assert "out-of-memory killer struck meanwhile (/proc/vmstat oom_kill 4 -> 5)" in line
    assert "7.0 GB resident" in line and "memory budget 8.0 GB, 3 stage(s) at once" in line
    # DVC removed the outputs before the command; its cache still holds the version dvc.lock records (a
    # failed run's checkout: tests/test_checkpoint_safety.py)
    assert line.endswith("its previous outputs are in DVC's cache: `dvc checkout train@x` restores them")
    assert "no out-of-memory kill" in memory.out_of_memory_line("train@x", 137, None, 5, budget)
