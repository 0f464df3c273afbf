"""Scale-out with Prefect workers (a real server and two worker processes: 25-60 s on the busy 2-core
machine): the pipeline deployed to a process work pool, two workers polling it, two flow
runs with disjoint targets of one DVC project. Each worker runs one of them, both complete, and the
project's `dvc status` is clean afterwards; a run naming another folder as `root` is refused. This is
the "Several machines" recipe of docs/orchestration.md on one host, with the server's login on (an anonymous request
gets 401; with several hosts, each worker has its own checkout and the DVC cache travels through a
remote).

Why it is built this way (it once failed with `sqlite3.OperationalError: database is locked` inside the
server's `UPDATE work_pool`): a pool created without a base job template makes each worker's first
contact write the process worker's default template into it, in a deferred SQLite transaction; with two
workers starting at once the second writer's read-to-write upgrade is refused at once (WAL and the busy
timeout do not cover that case). So the pool is created with the process worker's default template (no
worker ever writes it), the workers start one after the other and each must be online before the next
starts, and the server runs without its scheduler and the deployment without a cron schedule (no extra
writer every few seconds). Every wait is bounded and fails with what the worker logged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _toy_dvc import dvc_status, make_project, write_stage
from test_pipeline_deploy import free_port

REPO = Path(__file__).resolve().parent.parent
POOL = "scale-out"
ONLINE_WITHIN = 90.0  # seconds for one worker to send its first heartbeat on a busy 2-core machine
RUNS_WITHIN = 240.0
AUTH = "multitab:not-a-real-secret"


def _wait_online(client: Any, name: str, proc: subprocess.Popen[str], log: Path) -> None:
    """Return once worker `name` is ONLINE in the pool; fail with its log if it exits or takes too long."""
    deadline = time.monotonic() + ONLINE_WITHIN
    status = "not registered"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"worker {name} exited with code {proc.returncode}:\n{log.read_text()}")
        workers = {w.name: w for w in client.read_workers_for_work_pool(POOL, limit=10, offset=0)}
        if name in workers:
            status = str(workers[name].status)
            if workers[name].status == "ONLINE":
                return
        time.sleep(0.5)
    pytest.fail(f"worker {name} not online after {ONLINE_WITHIN:.0f} s (status: {status}):\n{log.read_text()}")


@pytest.mark.slow  # ~50-100 s; tests/test_fleet.py shares a matrix between two workers in the default run
def test_two_workers_share_the_runs_of_one_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.deploy import deploy_to_pool, start_server

    root = make_project(tmp_path / "p", {s: write_stage(s) for s in "abcd"})
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED", "false")  # no scheduled runs here
    # the recipe of docs/orchestration.md: the server demands a login (basic auth), every client and worker sends it
    monkeypatch.setenv("PREFECT_SERVER_API_AUTH_STRING", AUTH)
    monkeypatch.setenv("PREFECT_API_AUTH_STRING", AUTH)
    server_log = tmp_path / "server.log"
    server = start_server("127.0.0.1", port, log=server_log)
    workers: list[subprocess.Popen[str]] = []
    logs = [tmp_path / f"worker{i}.log" for i in (1, 2)]
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import WorkPoolCreate
        from prefect.deployments import run_deployment
        from prefect.settings import PREFECT_API_URL, temporary_settings
        from prefect.workers.process import ProcessWorker

        env = {
            **os.environ,
            "PREFECT_API_URL": api,
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        }
        import httpx
        from prefect.settings import PREFECT_API_AUTH_STRING

        anonymous = httpx.post(f"{api}/flows/filter", json={}, timeout=30)
        assert anonymous.status_code == 401, anonymous.text  # nothing without the login
        settings = {PREFECT_API_URL: api, PREFECT_API_AUTH_STRING: AUTH}
        with temporary_settings(updates=settings), get_client(sync_client=True) as client:
            client.create_work_pool(
                WorkPoolCreate(
                    name=POOL, type="process", base_job_template=ProcessWorker.get_default_base_job_template()
                )
            )
            deployment = deploy_to_pool(root, "params.yaml", POOL, "scale-out", scheduled=False)
            assert client.read_deployment(deployment).schedules == []
            # one after the other, each online (heartbeat seen) before the next starts and before the
            # runs exist, so neither can take both
            for i, log in enumerate(logs, 1):
                workers.append(
                    subprocess.Popen(  # noqa: S603
                        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
                         "--name", f"worker{i}", "--limit", "1"],
                        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                    )
                )
                _wait_online(client, f"worker{i}", workers[-1], log)
            runs = [
                run_deployment(deployment, parameters={"root": str(root), "targets": targets, "workers": 2},
                               timeout=0, as_subflow=False)
                for targets in (["a", "b"], ["c", "d"])
            ]
            deadline = time.monotonic() + RUNS_WITHIN
            states = {}
            while time.monotonic() < deadline:
                states = {r.id: client.read_flow_run(r.id).state for r in runs}  # type: ignore[union-attr]
                if all(s is not None and s.is_final() for s in states.values()):
                    break
                time.sleep(1)
            # a run that names another folder as `root` is refused before any stage runs: a worker only
            # runs the project its deployment was registered for
            foreign = make_project(tmp_path / "other", {"x": write_stage("x")})
            refused = run_deployment(deployment, parameters={"root": str(foreign)}, timeout=0, as_subflow=False)
            deadline = time.monotonic() + RUNS_WITHIN
            refused_state = None
            while time.monotonic() < deadline:
                refused_state = client.read_flow_run(refused.id).state  # type: ignore[union-attr]
                if refused_state is not None and refused_state.is_final():
                    break
                time.sleep(1)
        text = [log.read_text() for log in logs]
        assert refused_state is not None and refused_state.is_failed(), f"{refused_state}\n" + "\n".join(text)
        assert "is not the project this deployment runs" in (refused_state.message or ""), refused_state
        assert not (foreign / "out").exists()
        assert all(s is not None and s.is_completed() for s in states.values()), f"{states}\n" + "\n".join(text)
        # each worker ran one of the two (limit 1 each): the run's own log lines ("View at .../flow-run/ID")
        # come from the worker that executes it; a worker that lost the race for a run only logs its id
        # in "submitting" / "Aborted submission" lines
        taken = [[r.id for r in runs if f"flow-run/{r.id}" in t] for t in text]  # type: ignore[union-attr]
        assert [len(t) for t in taken] == [1, 1], f"runs per worker: {taken}\n" + "\n".join(text)
        assert sorted(p.name for p in (root / "out").glob("[!.]*")) == ["a", "b", "c", "d"]
        assert dvc_status(root) == {}
        # The root cause is gone: no worker wrote the pool's template, so no such write failed. (Under load
        # the SQLite server may still log a refused worker-heartbeat write, "database is locked" in an
        # INSERT INTO worker: not fatal, the next heartbeat is written; several machines use PostgreSQL.)
        server_text = server_log.read_text()
        assert "UPDATE work_pool" not in server_text, server_text
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
