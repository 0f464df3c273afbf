"""`make ui` end to end (slow: a real Prefect server, > 60 s on a busy machine): flows.deploy serves the
pipeline of a toy DVC project on a cron schedule; through the API the deployment has the schedule and
described parameters, its scheduled runs are visible, and a run triggered for one target completes and
writes the summary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from _toy_dvc import make_project, write_stage

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_served_deployment_is_scheduled_and_runs(tmp_path):
    root = make_project(tmp_path / "p", {"a": write_stage("a"), "b": write_stage("b", ["out/a"])})
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["orchestration"]["schedule"] = "*/5 * * * *"
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.deploy", "--root", str(root), "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        api = f"http://127.0.0.1:{port}/api"
        deadline = time.monotonic() + 180
        check = None
        while time.monotonic() < deadline:
            check = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "flows.check_deployment",
                    "--api-url",
                    api,
                    "--trigger",
                    "--targets",
                    "a",
                    "--timeout",
                    "180",
                ],
                env={**env, "PREFECT_API_URL": api},
                capture_output=True,
                text=True,
            )
            if "deployment multitab-pipeline/multitab" in check.stdout:
                break
            time.sleep(3)  # server or deployment not up yet
        assert check is not None and check.returncode == 0, check.stdout + check.stderr if check else ""
        assert "*/5 * * * *" in check.stdout
        assert "Scheduled" in check.stdout and "Completed" in check.stdout and "(targets a)" in check.stdout
        assert "no complete run of the whole DAG recorded here yet" in check.stdout
        summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
        assert summary["ran"] == ["a"] and "b" not in summary["stages"]
        # the Run form's fields come with descriptions (from the flow's docstring)
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from flows.deploy import FULL_NAME

        with temporary_settings(updates={PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            schema = client.read_deployment_by_name(FULL_NAME).parameter_openapi_schema
        fields = schema["properties"]
        assert {"root", "targets", "workers", "retries", "retry_delay"} <= set(fields)
        assert all(fields[f].get("description") for f in ("root", "targets", "retries")), fields
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
