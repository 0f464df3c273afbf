"""flows.pipeline on toy DVC projects (git init + dvc init in a tmp folder, one-line stages).

One Prefect test server for the module (prefect_test_harness); every test builds its own project so the
real dvc.yaml does not matter here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _toy_dvc import PY, dvc_status, make_project, write_stage
from flows.pipeline import PipelineFailed, StagePlan, pipeline, read_stage_graph, select


@pytest.fixture(scope="module", autouse=True)
def prefect_server():
    try:
        import prefect.server.api.server  # noqa: F401
    except TypeError as e:  # fastapi too new for Prefect 3.8.8's server
        pytest.fail(f"Prefect's server does not import ({e}): install the pins of pyproject.toml (fastapi)")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def run(root: Path, **kwargs) -> dict:
    try:
        pipeline(root=str(root), **kwargs)
    except PipelineFailed:
        pass
    return json.loads((root / "results" / "pipeline_summary.json").read_text())


def test_stage_graph_expands_foreach_and_selects_upstream(tmp_path):
    root = make_project(
        tmp_path / "p",
        {
            "a": write_stage("a"),
            "b": {
                "foreach": ["x", "y"],
                "do": {"cmd": "echo ${item} > out/b_${item}", "deps": ["out/a"], "outs": ["out/b_${item}"]},
            },
            "c": write_stage("c", ["out/b_x"]),
        },
    )
    plan = read_stage_graph(root)
    assert set(plan.order) == {"a", "b@x", "b@y", "c"}
    assert plan.upstream["b@x"] == ("a",) and plan.upstream["c"] == ("b@x",)
    assert plan.order.index("a") < plan.order.index("b@x") < plan.order.index("c")
    assert select(plan, ["c"]).order == ("a", "b@x", "c")
    assert set(select(plan, ["b"]).order) == {"a", "b@x", "b@y"}
    assert plan.descendants("a") == {"b@x", "b@y", "c"}
    with pytest.raises(ValueError, match="matches no stage"):
        select(plan, ["nope"])
    assert isinstance(plan, StagePlan)


def test_flaky_stage_is_retried_and_flow_completes(tmp_path):
    # Fails on its first two attempts (a counter outside DVC's outputs), then succeeds.
    flaky = write_stage(
        "flaky",
        ["out/a"],
        extra="""
        c = pathlib.Path('.attempts'); n = int(c.read_text()) + 1 if c.exists() else 1; c.write_text(str(n))
        assert n >= 3, f'injected failure {n}'""",
    )
    root = make_project(
        tmp_path / "p", {"a": write_stage("a"), "flaky": flaky, "z": write_stage("z", ["out/flaky"])}
    )
    summary = run(root, retries=2)
    assert summary["failed"] == [] and summary["not_run"] == []
    assert summary["retried"] == ["flaky"]
    assert summary["stages"]["flaky"]["attempts"] == 3
    assert len(summary["stages"]["flaky"]["failed_attempts"]) == 2
    assert sorted(summary["ran"]) == ["a", "flaky", "z"]
    assert (root / "out" / "z").read_text() == "a\nflaky\nz\n"
    assert dvc_status(root) == {}

    # A second run finds everything up to date and runs nothing.
    again = run(root)
    assert sorted(again["up_to_date"]) == ["a", "flaky", "z"] and again["ran"] == []


def test_failing_stage_stops_only_its_descendants(tmp_path):
    broken = write_stage("broken", ["out/a"], extra="raise SystemExit('broken on purpose')")
    root = make_project(
        tmp_path / "p",
        {
            "a": write_stage("a"),
            "broken": broken,
            "child": write_stage("child", ["out/broken"]),
            "grandchild": write_stage("grandchild", ["out/child"]),
            "side": write_stage("side", ["out/a"]),
            "side2": write_stage("side2", ["out/side"]),
        },
    )
    summary = run(root, retries=1)
    assert summary["failed"] == ["broken"]
    assert sorted(summary["not_run"]) == ["child", "grandchild"]
    assert sorted(summary["ran"]) == ["a", "side", "side2"]
    assert summary["stages"]["broken"]["attempts"] == 2
    assert "broken on purpose" in summary["stages"]["broken"]["error"]
    assert (
        "broken" in summary["stages"]["grandchild"]["error"]
        or "child" in summary["stages"]["grandchild"]["error"]
    )
    # dvc.lock is consistent: DVC reports exactly the stages that did not complete.
    assert set(dvc_status(root)) == {"broken", "child", "grandchild"}
    assert not (root / "out" / "child").exists()

    # The CLI exits non-zero and prints the failure (against the harness's server: no second start-up).
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": PREFECT_API_URL.value()}
    proc = subprocess.run(
        [PY, "-m", "flows.pipeline", "--root", str(root), "--retries", "0", "--targets", "grandchild"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED (1): broken" in proc.stdout + proc.stderr


def test_eight_independent_stages_run_in_parallel_without_lock_errors(tmp_path):
    stages = {
        f"s{i}": write_stage(
            f"s{i}",
            extra=f"""
            import time; t0 = time.time(); time.sleep(2)
            pathlib.Path('.times').mkdir(exist_ok=True); pathlib.Path('.times/s{i}').write_text(f'{{t0}} {{time.time()}}')""",
        )
        for i in range(8)
    }
    root = make_project(tmp_path / "p", stages)
    summary = run(root, workers=8, retries=0)
    assert summary["failed"] == [] and sorted(summary["ran"]) == sorted(stages)
    spans = [tuple(map(float, p.read_text().split())) for p in (root / ".times").iterdir()]
    # Overlap: the largest number of stage commands running at one moment.
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most >= 4, f"stages did not overlap: {spans}"
    assert dvc_status(root) == {}
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    assert sorted(lock["stages"]) == sorted(stages)


def test_gpu_stages_take_turns_on_the_visible_devices(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    record = """
        import os, time; t0 = time.time(); time.sleep(0.5)
        pathlib.Path('.gpu').mkdir(exist_ok=True)
        pathlib.Path('.gpu/' + os.environ['DVC_STAGE']).write_text(f"{os.environ.get('CUDA_VISIBLE_DEVICES')} {t0} {time.time()}")"""
    stages = {
        "train": {
            "foreach": ["x", "y", "z"],
            "do": {
                "cmd": "python scripts/train.py",
                "deps": ["scripts/train.py"],
                "outs": ["out/train_${item}"],
            },
        },
        "other": write_stage("other", extra=record),
    }
    train = write_stage("train", extra=record)
    stages["train"]["_script"] = train["_script"].replace(
        "'out/train'", "'out/' + os.environ['DVC_STAGE'].replace('@', '_')"
    )
    root = make_project(tmp_path / "p", stages)
    summary = run(root, workers=4, retries=0)
    assert summary["failed"] == [] and len(summary["ran"]) == 4
    seen = {p.name: p.read_text().split() for p in (root / ".gpu").iterdir()}
    assert {seen[f"train@{i}"][0] for i in "xyz"} == {"0"} and seen["other"][0] == "None"
    spans = sorted((float(v[1]), float(v[2])) for k, v in seen.items() if k.startswith("train"))
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans  # one at a time
