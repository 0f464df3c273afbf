"""Where a train stage's time goes under `make repro` outside the stage's own command, with dvc.lock written by
each stage itself (plain DVC, as before) and in merges (multitab.files.lock_writes), in one run.

    python benchmarks/stage_overhead.py [--source .] [--targets 'train@bench-p02_pd3_t3-*'] [--epochs 1]
                                        [--workers 2] [--repeats 1] [--out results/benchmarks/stage_overhead.json]

The project is a copy of the repository's tracked files (a fresh clone: the committed dvc.lock and runs.yaml,
every stage), with the bench group's training cut to `--epochs` epochs (the overhead does not depend on the
command's length); the targets' upstream stages are reproduced once with plain DVC, then the same copy is
timed through `python -m flows.pipeline --targets ...` (warm starts off: each command in its own process)
once per mode (MULTITAB_LOCK_WRITES=each, then batched; the order alternates between repeats), from the same
starting state each time. Per stage:

- `outside_command_seconds`: the stage's time in the flow (submitted to done, results/pipeline_summary.json)
  less its command's time from its process's start to its result (its atexit: recorded by a sitecustomize.py
  on PYTHONPATH), plus its share of the flow's dvc.lock merges;
- `dvc_before_command_seconds`: DVC's process start to the command's start (import, dvc.yaml and dvc.lock,
  the lock, hashing); `command_teardown_seconds`: the command's result to its exit as DVC sees it (its
  interpreter shutting down); `dvc_after_command_seconds`: from there to DVC's end (hashing the outputs, the
  run cache, dvc.lock when the stage writes it); `flow_seconds`: the rest (Prefect, starting the process);
  `dvc_cpu_seconds`: the CPU time of the stage's DVC process itself (not its command's), which depends less
  on what else the machine runs than the wall-clock times do.

The modes must leave the same results: dvc.lock equal but for the hashes of the train stages' outputs (a
run's metrics.json and dvclive log record its own seconds), each run's metrics.json equal but for its
seconds; a difference stops the benchmark. Ratios are batched / each, measured in the same run (goal:
`outside_command_seconds` <= 3 s on average).
"""

from __future__ import annotations

import argparse
import fnmatch
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

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from multitab.config import read_yaml  # noqa: E402
from multitab.runtime.provenance import cpu_model, git_commit  # noqa: E402

# Written into the copy's PYTHONPATH: every Python process the flow starts (DVC, the stage's command) records
# when it started and when it ended, by pid.
SITECUSTOMIZE = '''
import atexit, json, os, subprocess, sys, time
_OUT = os.environ.get("STAGE_OVERHEAD_PROCS")
if _OUT:
    _EXITS = []  # when a child this process waited for had exited (DVC: its stage's command)
    _communicate = subprocess.Popen.communicate
    def _timed_communicate(self, *args, **kwargs):
        try:
            return _communicate(self, *args, **kwargs)
        finally:
            _EXITS.append(time.time())
    subprocess.Popen.communicate = _timed_communicate
    def _record():
        end = time.time()
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:  # the boot time to 10 ms (/proc/stat's btime is whole seconds)
            boot = time.time() - float(f.read().split()[0])
        hz = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / hz  # this process's own user + system time, not its children's
        with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w") as f:
            json.dump({"argv": sys.orig_argv, "start": boot + int(fields[19]) / hz, "end": end, "cpu": cpu,
                       "child_exits": _EXITS}, f)
    atexit.register(_record)
'''
TIMING_KEYS = ("seconds", "per_second")


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """`cmd` in the project `cwd`, with that project's code first on PYTHONPATH (and the recording
    sitecustomize.py)."""
    env = {**env, "PYTHONPATH": os.pathsep.join([env.get("STAGE_OVERHEAD_SITE", ""), str(cwd / "src"), str(cwd)])}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout + proc.stderr


def copy_project(source: Path, dest: Path, epochs: int, env: dict[str, str]) -> None:
    """The tracked files of `source` (with the working tree's content) in a new git repository at `dest`."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=source, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = source / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    params = read_yaml(dest / "params.yaml")
    params["runs"]["bench"]["train"]["max_epochs"] = epochs
    # each command in its own process, whose start and end the sitecustomize.py records (a warm start forks it
    # from the flow's stage server instead: benchmarks/repro_wall.py measures that)
    params["orchestration"]["stage_server"] = False
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]
    run(["git", "init", "-q"], dest, env)
    run([*git, "add", "-A"], dest, env)
    run([*git, "commit", "-qm", "stage_overhead"], dest, env)


def stages_of(root: Path, targets: str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(the stages `targets` names, their upstream stages) as the flow sees them."""
    out = run([sys.executable, "-c", (
        "import json, sys; from flows.dag import read_stage_graph, select, sync_runs_file\n"
        "sync_runs_file('.')\n"
        f"print(json.dumps(select(read_stage_graph('.'), [{targets!r}]).order))")], root, env)
    order = json.loads(out.strip().splitlines()[-1])
    wanted = [s for s in order if fnmatch.fnmatchcase(s, targets)]
    return wanted, [s for s in order if s not in wanted]


def _process(records: list[dict[str, Any]], *words: str) -> dict[str, Any]:
    found = [r for r in records if all(any(w == a or a.endswith(w) for a in r["argv"]) for w in words)]
    if len(found) != 1:
        raise SystemExit(f"expected one process with {words} in its command line, found {len(found)}")
    return found[0]


def measure(root: Path, mode: str, stages: list[str], workers: int, env: dict[str, str]) -> dict[str, Any]:
    procs = Path(tempfile.mkdtemp(prefix="procs-", dir=root.parent))
    run_env = {**env, "MULTITAB_LOCK_WRITES": mode, "STAGE_OVERHEAD_PROCS": str(procs)}
    t0 = time.monotonic()
    said = run([sys.executable, "-m", "flows.pipeline", "--targets", *stages, "--workers", str(workers),
                "--retries", "0"], root, run_env)
    wall = time.monotonic() - t0
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    if sorted(summary["ran"]) != sorted(stages):
        raise SystemExit(f"{mode}: expected {stages} to run, the flow said:\n{said[-3000:]}")
    records = [json.loads(p.read_text()) for p in procs.glob("*.json")]
    merges = summary.get("lock_writes", {}).get("seconds", 0.0)
    rows = {}
    for stage in stages:
        dvc = _process(records, "repro", stage)
        cmd = _process(records, "stages.train", stage.split("@", 1)[1])
        in_flow = summary["stages"][stage]["seconds"]
        # the command runs until its result is printed (its atexit record: the measure); DVC sees it end
        # when its interpreter has shut down (`command_teardown_seconds` later)
        cmd_exit = min((t for t in dvc["child_exits"] if t >= cmd["end"]), default=cmd["end"])
        command = cmd["end"] - cmd["start"]
        rows[stage] = {
            "stage_seconds": round(in_flow, 2),
            "command_seconds": round(command, 2),
            "outside_command_seconds": round(in_flow - command + merges / len(stages), 2),
            "dvc_before_command_seconds": round(cmd["start"] - dvc["start"], 2),
            "command_teardown_seconds": round(cmd_exit - cmd["end"], 2),
            "dvc_after_command_seconds": round(dvc["end"] - cmd_exit, 2),
            "flow_seconds": round(in_flow - (dvc["end"] - dvc["start"]), 2),
            "dvc_cpu_seconds": round(dvc["cpu"], 2),
        }

    def mean(key: str) -> float:
        return round(statistics.fmean(r[key] for r in rows.values()), 2)

    keys = ["outside_command_seconds", "dvc_before_command_seconds", "command_teardown_seconds",
            "dvc_after_command_seconds", "flow_seconds", "dvc_cpu_seconds", "command_seconds", "stage_seconds"]
    return {"mode": mode, "flow_wall_seconds": round(wall, 2), "lock_merges": summary.get("lock_writes"),
            "mean": {k: mean(k) for k in keys}, "stages": rows}


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if not any(t in k for t in TIMING_KEYS)}
    return value


def results(root: Path, stages: list[str]) -> dict[str, Any]:
    """What must not depend on the mode: dvc.lock without the train stages' output hashes, and each run's
    metrics.json without its timings."""
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    runs = yaml.safe_load((root / "runs.yaml").read_text())["train_runs"]
    metrics = {}
    for stage in stages:
        entry = lock["stages"][stage]
        entry["outs"] = [o["path"] for o in entry.get("outs", [])]
        out = runs[stage.split("@", 1)[1]]["out"]
        metrics[stage] = _without_timing(json.loads((root / out / "metrics.json").read_text()))
    return {"dvc.lock": lock, "metrics": metrics}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=REPO, help="the repository to copy (its tracked files)")
    p.add_argument("--targets", default="train@bench-p02_pd3_t3-*", help="train stages to time (a pattern)")
    p.add_argument("--epochs", type=int, default=1, help="the bench group's max_epochs in the copy")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "results" / "benchmarks" / "stage_overhead.json")
    a = p.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stage-overhead-") as tmp:
        work = Path(tmp)
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env = {**os.environ, "STAGE_OVERHEAD_SITE": str(work / "site"),
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               "PREFECT_HOME": str(work / "prefect"), "DVC_SITE_CACHE_DIR": str(work / "dvc-site"),
               "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.pop("PREFECT_API_URL", None)
        base = work / "base"
        copy_project(a.source.resolve(), base, a.epochs, env)
        stages, upstream = stages_of(base, a.targets, env)
        if not stages:
            raise SystemExit(f"--targets {a.targets!r} names no stage")
        for stage in upstream:
            run([sys.executable, "-m", "dvc", "repro", "--single-item", stage], base, env)
        runs, seen = [], {}
        for i in range(a.repeats):
            for mode in (("each", "batched") if i % 2 == 0 else ("batched", "each")):
                root = work / f"{mode}-{i}"
                shutil.copytree(base, root, symlinks=True)
                runs.append(measure(root, mode, stages, a.workers, env))
                seen[mode] = results(root, stages)
                print(f"{mode}: {json.dumps(runs[-1]['mean'])}", flush=True)
        if seen["each"] != seen["batched"]:
            raise SystemExit("the modes left different results (dvc.lock or the runs' metrics): see the copies")
        commit = git_commit(a.source.resolve())
        edited = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=a.source,
                                capture_output=True, text=True).stdout.split("\n")
    ratios = {}
    for key in runs[0]["mean"]:
        each = statistics.fmean(r["mean"][key] for r in runs if r["mode"] == "each")
        batched = statistics.fmean(r["mean"][key] for r in runs if r["mode"] == "batched")
        ratios[key] = {"each": round(each, 2), "batched": round(batched, 2),
                       "ratio": round(batched / each, 3) if each else None}
    record = {
        "benchmark": "stage_overhead", "commit": commit,
        "edited_since_commit": [line[3:] for line in edited if line.strip()],  # copied as they are in --source
        "cpu": cpu_model() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)), "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "targets": a.targets, "stages": len(stages), "epochs": a.epochs, "workers": a.workers,
        "repeats": a.repeats, "wall_seconds": round(time.monotonic() - started, 1),
        "same_results": True, "goal": "outside_command_seconds <= 3 on average (batched)",
        "summary": ratios, "runs": runs,
    }
    print(json.dumps(record["summary"], indent=2))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
