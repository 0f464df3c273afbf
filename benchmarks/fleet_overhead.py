"""What sharing a stage between machines costs per stage (docs/benchmarks.md, "Several machines"): the DVC
remote's part (flows/remote.py) and the Prefect state round trips, against the stage's own time.

    python benchmarks/fleet_overhead.py [--stage-seconds 2] [--repeats 5] [--checkpoint-mb 10]
                                        [--out results/benchmarks/fleet_overhead_cpu.json]

On a toy DVC project with a local-folder remote (what tests/test_fleet.py uses; a network remote adds its
transfer time), each repeat measures, in seconds:
- `command`: the stage's command alone (it sleeps --stage-seconds: the stage's own time);
- `repro`: `dvc repro --single-item --pull` of that stage where it runs (DVC's overhead = repro - command);
- `push`: `dvc push --run-cache <stage>` after it (its output and run-cache entry);
- `pull`: `dvc pull --run-cache --allow-missing` on another clone (the coordinator's pull before planning);
- `restore`: `dvc repro --single-item --pull` there (the run cache restores it; the command does not run);
- `checkpoint_copy`: one copy of a --checkpoint-mb checkpoint file to the remote (flows/remote.py);
- `state_round_trip`: one Prefect API call on a task run (the mean of: set Running, set Completed, read it),
  against a Prefect server started here (SQLite; a stage's task costs a few such calls).
Medians are recorded with the machine's CPU, the commit and the wall time of the whole benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "src")]
PY = sys.executable


def cpu() -> dict[str, str]:
    """The CPU's model name and family, from /proc/cpuinfo."""
    found: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family") and key not in found:
                found[key] = value.strip()
    except OSError:
        pass
    return found


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def timed(cmd: list[str], cwd: Path) -> float:
    env = {**os.environ, "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def project(base: Path, stage_seconds: float, repeats: int) -> tuple[Path, Path]:
    """An origin with one stage per repeat (each sleeps `stage_seconds`), a local remote, two clones."""
    import yaml

    origin = base / "origin"
    origin.mkdir()
    (origin / "s.py").write_text(
        "import pathlib, sys, time\n"
        f"time.sleep({stage_seconds})\n"
        "pathlib.Path('out').mkdir(exist_ok=True)\n"
        "pathlib.Path('out', sys.argv[1]).write_text(sys.argv[1] * 1000)\n"
    )
    stage = {"foreach": [f"r{i}" for i in range(repeats)],
             "do": {"cmd": "python s.py ${item}", "deps": ["s.py"], "outs": ["out/${item}"]}}
    (origin / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"s": stage}}))
    git = ["git", "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], cwd=origin, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=origin, check=True)
    subprocess.run([PY, "-m", "dvc", "remote", "add", "-q", "-d", "fleet", str(base / "remote")], cwd=origin,
                   check=True)
    subprocess.run([*git, "add", "-A"], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=origin, check=True)
    for name in ("worker", "coordinator"):
        subprocess.run(["git", "clone", "-q", str(origin), str(base / name)], check=True)
    return base / "worker", base / "coordinator"


def dvc_costs(base: Path, stage_seconds: float, repeats: int, checkpoint_mb: int) -> dict[str, list[float]]:
    from flows import remote

    worker, coordinator = project(base, stage_seconds, repeats)
    times: dict[str, list[float]] = {k: [] for k in ("command", "repro", "push", "pull", "restore", "checkpoint_copy")}
    ckpt = worker / "ckpt"
    ckpt.mkdir()
    for i in range(repeats):
        stage = f"s@r{i}"
        times["command"].append(timed([PY, "s.py", f"c{i}"], worker))
        times["repro"].append(timed([PY, "-m", "dvc", "repro", "--single-item", "--pull", stage], worker))
        times["push"].append(timed([PY, "-m", "dvc", "--wait-for-lock", "push", "--run-cache", stage], worker))
        times["pull"].append(timed([PY, "-m", "dvc", "--wait-for-lock", "pull", "--run-cache", "--allow-missing"],
                                   coordinator))
        times["restore"].append(timed([PY, "-m", "dvc", "repro", "--single-item", "--pull", stage], coordinator))
        (ckpt / "last.pt").write_bytes(os.urandom(checkpoint_mb * 2**20))
        fs, root = remote.remote_fs(worker)
        t0 = time.perf_counter()
        remote.copy_changed(fs, remote.partial_path(fs, root, stage), ckpt, {})
        times["checkpoint_copy"].append(time.perf_counter() - t0)
        remote.drop_checkpoints(worker, stage)
    return times


def state_round_trips(base: Path, n: int) -> list[float]:
    """Seconds per (set a task run's state, read it back) against a Prefect server started here."""
    from test_pipeline_deploy import free_port  # type: ignore[import-not-found]

    os.environ["PREFECT_HOME"] = str(base / "prefect-home")
    os.environ.pop("PREFECT_API_URL", None)
    from flows.deploy import start_server

    port = free_port()
    server = start_server("127.0.0.1", port, log=base / "server.log")
    try:
        from prefect import flow, task
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings
        from prefect.states import Completed, Running

        @flow(name="fleet-overhead")
        def bench_flow() -> None: ...

        @task(name="stage")
        def bench_task() -> None: ...

        with temporary_settings(updates={PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}), \
                get_client(sync_client=True) as client:
            flow_run = client.create_flow_run(bench_flow)
            out = []
            for i in range(n):
                task_run = client.create_task_run(bench_task, flow_run_id=flow_run.id, dynamic_key=str(i))
                t0 = time.perf_counter()
                client.set_task_run_state(task_run.id, Running())
                client.set_task_run_state(task_run.id, Completed())
                client.read_task_run(task_run.id)
                out.append((time.perf_counter() - t0) / 3)  # per call
            return out
    finally:
        server.terminate()
        server.wait(timeout=60)


def projection(overhead: float, machines: tuple[int, ...] = (1, 4, 8, 16)) -> dict[str, Any]:
    """PROJECTED wall time of the MultiTab-Bench study at 1,000,000 samples (9 configurations x 5 models x 5
    seeds = 225 runs, each one stage) on N GPU machines, one run at a time per machine. Measured: the H100
    epoch of MultiTab-Net at 1,000,000 rows (epoch_throughput_h100_fp32.json) and `overhead` (this run,
    CPU, local-folder remote). Assumed: every model's epoch costs that much, every run trains the paper's
    100 epochs at most (early stopping only shortens it), runs are spread evenly, the overhead does not
    grow with the number of machines."""
    h100 = json.loads((REPO / "results" / "benchmarks" / "epoch_throughput_h100_fp32.json").read_text())
    runs, epochs = 9 * 5 * 5, 100
    run_seconds = h100["epoch_seconds"] * epochs
    return {
        "what": "PROJECTION (see projection() in benchmarks/fleet_overhead.py for what is measured and assumed)",
        "runs": runs,
        "measured_h100_epoch_seconds": h100["epoch_seconds"],
        "assumed_epochs_per_run": epochs,
        "projected_run_seconds": round(run_seconds, 1),
        "measured_overhead_per_stage_seconds": overhead,
        "overhead_share": round(overhead / (run_seconds + overhead), 4),
        "projected_wall_hours": {
            str(n): round(-(-runs // n) * (run_seconds + overhead) / 3600, 2) for n in machines
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stage-seconds", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--checkpoint-mb", type=int, default=10)
    p.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks" / "fleet_overhead_cpu.json")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests"))
    t0 = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="multitab-fleet-bench-"))
    try:
        times = dvc_costs(base, a.stage_seconds, a.repeats, a.checkpoint_mb)
        times["state_round_trip"] = state_round_trips(base, 20)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    per_stage = med["repro"] - med["command"] + med["push"] + med["restore"] + 3 * med["state_round_trip"]
    record: dict[str, Any] = {
        "what": "coordination overhead per stage of several machines sharing a DVC remote (local folder) and a "
                "Prefect server (SQLite), medians in seconds; see benchmarks/fleet_overhead.py",
        "cpu": cpu(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_at_end": list(os.getloadavg()),
        "commit": commit(),
        "stage_seconds": a.stage_seconds,
        "checkpoint_mb": a.checkpoint_mb,
        "repeats": a.repeats,
        "median_seconds": med,
        "dvc_overhead_seconds": round(med["repro"] - med["command"], 3),
        "overhead_per_stage_seconds": round(per_stage, 3),
        "overhead_per_stage_formula": "(repro - command) + push + restore + 3 x state_round_trip "
                                      "(the coordinator's pull is once per run, not per stage)",
        "all_seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    record["projection"] = projection(record["overhead_per_stage_seconds"])
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, a.out)
    print(json.dumps({k: record[k] for k in ("median_seconds", "overhead_per_stage_seconds", "wall_seconds",
                                              "projection")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
