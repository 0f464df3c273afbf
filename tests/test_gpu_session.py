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
    records = ["study_cost_cpu_stacked_data_graph.json",
               "study_cost_cpu_stacked_data_graph_nondeterministic_multitab_net.json",
               "precision_control_cpu.json", "projection_check_cpu.json", "gpu_session.log"]
    for name in records:
        assert (tmp_path / name).is_file(), name
    best = json.loads((tmp_path / "study_cost_cpu_stacked_data_graph.json").read_text())
    assert best["epochs_measured_at_rows"] == 70_000 and "ASSUMED" in best["epochs_source"]
    assert best["stack_data"] == {"3": ["p02_pd3_t3", "p06_pd3_t3", "p10_pd3_t3", "p06_pd4_t3", "p06_pd5_t3",
                                        "p06_pd234_t3"], "5": ["p06_pd3_t5"], "7": ["p06_pd3_t7", "p04_pdmix_t7"]}
    assert best["cuda_graph"] is True and best["deterministic"] is True
    assert best["measured"]["7"]["mmoe"]["cuda_graph"] == "not captured: cpu"
    loose = json.loads((tmp_path / "study_cost_cpu_stacked_data_graph_nondeterministic_multitab_net.json").read_text())
    assert loose["models"] == ["multitab_net"] and loose["deterministic_requested"] is False
    assert loose["deterministic"] is False
    control = json.loads((tmp_path / "precision_control_cpu.json").read_text())
    assert "no effect on cpu" in json.dumps(control)
    check = json.loads((tmp_path / "projection_check_cpu.json").read_text())
    assert check["n_samples"] == 2000 and check["seeds"] == 2 and check["stack_seeds"] is True
    for key in ("with_record_epochs", "with_real_epochs"):
        assert set(check[key]) == {"projected_seconds", "ratio", "within_15_percent"}
    assert all(e <= 3 for v in check["per_model"].values() for e in v["real_epochs"])


def test_the_script_refuses_an_unknown_argument() -> None:
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "--dryrun"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr
