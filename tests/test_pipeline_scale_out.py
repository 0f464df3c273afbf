"""Scale-out with Prefect workers (a real server and two worker processes: 45 s on the 2-core machine
while it ran other jobs): the pipeline deployed to a process work pool, two workers polling it, two flow
runs with disjoint targets of one DVC project. Each worker runs one of them, both complete, and the
project's `dvc status` is clean afterwards. This is the README's "Several machines" recipe on one host
(with several hosts, each worker has its own checkout and the DVC cache travels through a remote)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _toy_dvc import dvc_status, make_project, write_stage
from test_pipeline_deploy import free_port

REPO = Path(__file__).resolve().parent.parent
POOL = "scale-out"


def test_two_workers_share_the_runs_of_one_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.deploy import deploy_to_pool, start_server

    root = make_project(tmp_path / "p", {s: write_stage(s) for s in "abcd"})
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    server = start_server("127.0.0.1", port)
    workers: list[subprocess.Popen[str]] = []
    logs = [tmp_path / f"worker{i}.log" for i in (1, 2)]
    try:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import WorkPoolCreate
        from prefect.deployments import run_deployment
        from prefect.settings import PREFECT_API_URL, temporary_settings

        env = {
            **os.environ,
            "PREFECT_API_URL": api,
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        }
        with temporary_settings(updates={PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
            deployment = deploy_to_pool(root, "params.yaml", POOL, "scale-out")
            for i, log in enumerate(logs, 1):
                workers.append(
                    subprocess.Popen(  # noqa: S603
                        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL,
                         "--name", f"worker{i}", "--limit", "1"],
                        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                    )
                )
            # both workers online (heartbeat seen) before the runs exist, so neither can take both
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                online = client.read_workers_for_work_pool(POOL, limit=10, offset=0)
                if len([w for w in online if w.status == "ONLINE"]) == 2:
                    break
                time.sleep(1)
            runs = [
                run_deployment(deployment, parameters={"root": str(root), "targets": targets, "workers": 2},
                               timeout=0, as_subflow=False)
                for targets in (["a", "b"], ["c", "d"])
            ]
            deadline = time.monotonic() + 240
            states = {}
            while time.monotonic() < deadline:
                states = {r.id: client.read_flow_run(r.id).state for r in runs}  # type: ignore[union-attr]
                if all(s is not None and s.is_final() for s in states.values()):
                    break
                time.sleep(1)
        text = [log.read_text() for log in logs]
        assert all(s is not None and s.is_completed() for s in states.values()), f"{states}\n" + "\n".join(text)
        # each worker ran one of the two (limit 1 each): the run's own log lines ("View at .../flow-run/ID")
        # come from the worker that executes it; a worker that lost the race for a run only logs its id
        # in "submitting" / "Aborted submission" lines
        taken = [[r.id for r in runs if f"flow-run/{r.id}" in t] for t in text]  # type: ignore[union-attr]
        assert [len(t) for t in taken] == [1, 1], f"runs per worker: {taken}\n" + "\n".join(text)
        assert sorted(p.name for p in (root / "out").glob("[!.]*")) == ["a", "b", "c", "d"]
        assert dvc_status(root) == {}
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
