"""Where a fresh clone's `make repro` spends its wall, with warm starts and without, in one run.

    python benchmarks/repro_wall.py [--source .] [--modes warm cold] [--out FILE] [--keep DIR]

For each mode, clones `--source`'s HEAD into a new folder (nothing carried over: its own venv, DVC cache and
Prefect database), sets `orchestration.stage_server` (warm: true, cold: false; no stage reads it, so the
outputs must not change), runs `make repro` as a researcher does and times it from the command to its end.
Then, from the clone's results/pipeline_summary.json and each run's metrics.json: the flow's wall, the
bootstrap before it (venv, pinned stack, Data Docs assets, Prefect's start), every stage's seconds summed by
kind, and for the train stages their training loops (`train_seconds`) against the rest of the stage (its
fixed cost: DVC, the command's start, data loading, evaluation, writing). Also results/metrics.json's md5
per mode (the modes must agree) and whether `dvc status` is clean afterwards. Run it on an otherwise idle
machine (`flock /tmp/multitab-bench.lock ...`); the record names the CPU and the load average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
# variables of this shell that would steer the clone's run elsewhere (a server, a DVC remote, another root)
_DROP_ENV = ("MULTITAB_STAGE_SERVER", "MULTITAB_STAGE_PEAK_FILE", "PREFECT_API_URL", "VIRTUAL_ENV")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def set_stage_server(clone: Path, on: bool) -> None:
    """orchestration.stage_server in the clone's params.yaml, the line edited in place (comments kept)."""
    params = clone / "params.yaml"
    value = "true" if on else "false"
    text, n = re.subn(r"(?m)^(  stage_server:\s*)(true|false)", rf"\g<1>{value}", params.read_text())
    if n != 1:
        raise SystemExit(f"{params}: no `orchestration.stage_server:` line to set")
    params.write_text(text)


def run_mode(source: Path, mode: str, folder: Path) -> dict:
    clone = folder / mode
    subprocess.run(["git", "clone", "--quiet", str(source), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    set_stage_server(clone, mode == "warm")
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p + "/")
    log = folder / f"{mode}.log"
    load_before = os.getloadavg()
    t0 = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(["make", "repro"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    record: dict = {"mode": mode, "commit": commit, "exit_code": rc, "wall_seconds": round(wall, 1),
                    "load_average_before": load_before, "load_average_after": os.getloadavg(), "log": str(log)}
    if rc != 0:
        return record
    summary = json.loads((clone / "results" / "pipeline_summary.json").read_text())
    record["pipeline_seconds"] = summary["wall_seconds"]
    record["before_pipeline_seconds"] = round(wall - summary["wall_seconds"], 1)
    record["workers"] = summary["workers"]
    runs = yaml.safe_load((clone / "runs.yaml").read_text())["train_runs"]
    kinds: dict[str, list[float]] = defaultdict(list)
    train_fixed, train_loops = [], []
    for stage, info in summary["stages"].items():
        kind = stage.split("@", 1)[0]
        kinds[kind].append(info["seconds"])
        if kind == "train":
            metrics = json.loads((clone / runs[stage.split("@", 1)[1]]["out"] / "metrics.json").read_text())
            train_loops.append(metrics["train_seconds"])
            train_fixed.append(info["seconds"] - metrics["train_seconds"])
    record["stages"] = len(summary["stages"])
    record["stage_seconds_sum"] = round(sum(sum(v) for v in kinds.values()), 1)
    record["by_kind"] = {k: {"n": len(v), "seconds": round(sum(v), 1)} for k, v in sorted(kinds.items())}
    record["train"] = {
        "n": len(train_loops),
        "training_loop_seconds": round(sum(train_loops), 1),
        "fixed_seconds": round(sum(train_fixed), 1),
        "fixed_seconds_per_stage": round(sum(train_fixed) / max(len(train_fixed), 1), 2),
    }
    record["metrics_md5"] = hashlib.md5((clone / "results" / "metrics.json").read_bytes()).hexdigest()  # noqa: S324
    status = subprocess.run([str(clone / ".venv" / "bin" / "dvc"), "status", "-q"], cwd=clone, env=env)
    record["dvc_status_clean"] = status.returncode == 0
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=REPO, help="the repository to clone (its HEAD)")
    ap.add_argument("--modes", nargs="+", choices=["warm", "cold"], default=["warm", "cold"])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks" / "repro_wall.json")
    ap.add_argument("--keep", type=Path, help="clone into this folder and keep it (default: a temporary one)")
    a = ap.parse_args()
    folder = a.keep or Path(tempfile.mkdtemp(prefix="multitab-repro-wall-"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    modes = {m: run_mode(a.source.resolve(), m, folder) for m in a.modes}
    record = {
        "benchmark": "repro_wall",
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()},
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "modes": modes,
    }
    if {"warm", "cold"} <= modes.keys() and all(m.get("exit_code") == 0 for m in modes.values()):
        warm, cold = modes["warm"], modes["cold"]
        record["same_metrics"] = warm["metrics_md5"] == cold["metrics_md5"]
        record["ratios_warm_to_cold"] = {
            "wall": round(warm["wall_seconds"] / cold["wall_seconds"], 3),
            "pipeline": round(warm["pipeline_seconds"] / cold["pipeline_seconds"], 3),
            "stage_seconds_sum": round(warm["stage_seconds_sum"] / cold["stage_seconds_sum"], 3),
            "train_fixed_per_stage": round(warm["train"]["fixed_seconds_per_stage"]
                                           / cold["train"]["fixed_seconds_per_stage"], 3),
        }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    if any(m.get("exit_code") != 0 for m in modes.values()) or record.get("same_metrics") is False:
        sys.exit(1)


if __name__ == "__main__":
    main()
