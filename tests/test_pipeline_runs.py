"""How `python -m flows.pipeline` (`make repro`) runs show in Prefect (flows/run_record.py, flows/deploy.py): a
run whose process was killed is marked Crashed at the next start instead of staying Running, and a run is
listed under the deployment `make ui` serves, which the checkout's own server gets registered."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _toy_dvc import PY, make_project, write_stage


@pytest.fixture(scope="module")
def api():
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield PREFECT_API_URL.value()


def cli(root: Path, api_url: str | None, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    full |= {"PYTHONPATH": os.pathsep.join(sys.path), **env}
    if api_url:
        full["PREFECT_API_URL"] = api_url
    return subprocess.run([PY, "-m", "flows.pipeline", "--root", str(root)], env=full, capture_output=True,
                          text=True, timeout=600)


def flow_runs(root: Path) -> list:
    """The flow runs of the project `root` on the tests' server, oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(sort=FlowRunSort.START_TIME_ASC, limit=200)
    return [r for r in runs if (r.parameters or {}).get("root") == str(root.resolve())]


def test_a_run_killed_mid_stage_is_marked_crashed_at_the_next_start(tmp_path, api):
    slow = write_stage("slow", extra="""
        import os, time
        pathlib.Path(os.environ["TOY_STARTED"]).touch()
        time.sleep(float(os.environ.get("TOY_SLEEP", "0")))""")
    root = make_project(tmp_path / "p", {"slow": slow})
    started = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": api, "TOY_SLEEP": "300",
            "TOY_STARTED": str(started)}
    proc = subprocess.Popen([PY, "-m", "flows.pipeline", "--root", str(root)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
    assert started.exists(), "the stage never started"
    os.killpg(proc.pid, signal.SIGKILL)  # the flow and everything below it: nothing can report the end
    proc.wait(timeout=60)
    (killed,) = flow_runs(root)
    assert killed.state.type.value == "RUNNING"  # what the UI showed for ever
    assert killed.infrastructure_pid == f"multitab:{os.uname().nodename}:{proc.pid}"

    done = cli(root, api, TOY_SLEEP="0", TOY_STARTED=str(started))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "was still Running although its process is gone: marked Crashed" in done.stdout + done.stderr, done.stderr
    runs = {r.id: r for r in flow_runs(root)}
    assert runs[killed.id].state.type.value == "CRASHED"
    assert "ended without reporting the run's end" in runs[killed.id].state.message
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    with get_client(sync_client=True) as client:
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[killed.id])),
                                      sort=TaskRunSort.EXPECTED_START_TIME_ASC, limit=50)
    assert [t.state.type.value for t in tasks] == ["CRASHED"]
    (new,) = [r for r in runs.values() if r.id != killed.id]
    assert new.state.type.value == "COMPLETED"
    # a run whose process lives (this one, now ended normally) is never touched
    assert cli(root, api, TOY_STARTED=str(started)).returncode == 0
    assert {r.id: r for r in flow_runs(root)}[new.id].state.type.value == "COMPLETED"


def test_a_run_is_listed_under_this_checkouts_deployment(tmp_path, api):
    """With the deployment of `make ui` registered for this checkout, a `make repro` run is one of its flow
    runs (and still runs here, to completion); a deployment of another checkout is left alone."""
    from prefect.client.orchestration import get_client

    from flows.deploy import FULL_NAME, deployment_options
    from flows.orchestrate import pipeline

    root = make_project(tmp_path / "p", {"a": write_stage("a")})
    other = make_project(tmp_path / "other", {"a": write_stage("a")})
    pipeline.to_deployment(**deployment_options(other.resolve(), "params.yaml")).apply()
    assert cli(root, api).returncode == 0
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(FULL_NAME)
    assert [r.deployment_id for r in flow_runs(root)] == [None]  # another checkout's deployment

    pipeline.to_deployment(**deployment_options(root.resolve(), "params.yaml")).apply()
    (root / "scripts" / "a.py").write_text((root / "scripts" / "a.py").read_text() + "\n# again\n")
    done = cli(root, api)
    assert done.returncode == 0, done.stdout + done.stderr
    last = flow_runs(root)[-1]
    assert last.deployment_id == deployment.id and last.state.type.value == "COMPLETED"
    assert last.name.startswith("all stages @ ") and last.parameters["root"] == str(root.resolve())


def test_the_checkouts_own_server_gets_the_deployment_and_its_runs(tmp_path):
    """Prefect's temporary server (no PREFECT_API_URL: the database in PREFECT_HOME, the checkout's .prefect/
    outside the tests) gets the deployment `make ui` serves registered by the first run, and every run under
    it: the deployment's page lists them."""
    root = make_project(tmp_path / "p", {"a": write_stage("a")})
    home = tmp_path / "prefect-home"
    done = cli(root, None, PREFECT_HOME=str(home))
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(home / "prefect.db") as db:
        deployments = db.execute("SELECT id, name FROM deployment").fetchall()
        runs = db.execute("SELECT deployment_id, state_type FROM flow_run").fetchall()
    assert [name for _, name in deployments] == ["multitab"]
    assert runs == [(deployments[0][0], "COMPLETED")]
