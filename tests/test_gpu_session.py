"""benchmarks/gpu_session.sh --dry-run: every step of the prepared GPU session run on the CPU at tiny sizes, so
that a script that cannot run is found before a lent machine's time is spent on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_every_record(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PY": sys.executable}
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "every step passed" in done.stdout
    records = ["stacked_throughput_cpu.json", "study_cost_cpu_stacked.json", "study_cost_cpu.json",
               "concurrency/study_cost_cpu_stacked_2way_1.json", "concurrency/study_cost_cpu_stacked_2way_2.json"]
    for name in records:
        assert (tmp_path / name).is_file(), name
    stacked = json.loads((tmp_path / "study_cost_cpu_stacked.json").read_text())
    separate = json.loads((tmp_path / "study_cost_cpu.json").read_text())
    assert stacked["epochs_measured_at_rows"] == separate["epochs_measured_at_rows"] == 70_000
    assert "ASSUMED" in separate["epochs_source"]
    assert stacked["epochs_rule"].startswith("stacked: the max")
    by_config = stacked["epochs_per_run_by_config"]["p06_pd3_t7"]
    assert by_config["mmoe"] >= separate["epochs_per_run_by_config"]["p06_pd3_t7"]["mmoe"]


def test_the_script_refuses_an_unknown_argument() -> None:
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "--dryrun"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr
