"""The data stages at the paper's sizes (Table 1) on the offline stand-ins: wall time, CPU time and peak
resident memory of each stage, at a tenth and at full size, and how peak memory grows from the one to the
other.

Each stage runs as DVC runs it (`python -m stages.<stage> ...`, the command of dvc.yaml with a params file
whose stand-in rows are the published row counts), in its own process; its peak resident set is that
process's (wait4's ru_maxrss) or, where larger, the sum over its process tree sampled every 0.2 s (preprocess
maps columns on worker processes below a fork server; CPU seconds are the stage process's own). Sizes:
AliExpress 12,157,894 train (its validation tenth included) + 5,559,301 test rows, Higgs 11,000,000, ACS
Income 1,664,500 (src/multitab/datasets/schema.py `real_rows`).

Bars (docs/benchmarks.md, "Data stages at the paper's sizes"): every stage ends, peak <= 8 GB and <= 10 min
per stage at full size on a 2-core machine; peak memory at full size <= 2x that at a tenth.

    python benchmarks/data_scale.py --out results/benchmarks/data_scale   # writes .json and .md

Needs ~20 GB of disk for AliExpress at full size (removed as it goes unless --keep). A stage whose resident
memory passes --kill-above-gb is stopped (and recorded as such), so that a regression cannot take the
machine down; a full-size stage waits (up to 10 minutes) for --min-free-gb of available memory.

Old against new: `--against /path/to/other/checkout` (e.g. a `git worktree add ../old <commit>`) runs each
stage of that checkout (its own stages/, src/ and params.yaml, this interpreter) right before this one's, in
its own work folder, so that both see the same load; the record holds both and the table gains its rows.
Without --keep, a stage's inputs that no later stage reads (raw after split, splits after preprocess) are
removed as it goes, to bound the disk used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from multitab.config import read_yaml
from multitab.datasets.schema import get_schema
from multitab.runtime.provenance import cpu_model, git_commit

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("acquire", "split", "validate_raw", "preprocess", "validate_processed")
DATASETS = ("acs_income", "higgs", "aliexpress")
BARS = {"peak_rss_gb": 8.0, "seconds": 600.0, "growth": 2.0}
# Issue 51's measurements of the code before the stages worked by columns (same machine type, 2-core AMD
# EPYC, 24 GB; `dvc repro --single-item`): seconds and peak RSS in GB per stage; None: did not finish.
BEFORE: dict[str, dict[str, tuple[float, float] | None]] = {
    "acs_income": {"acquire": (6.6, 0.5), "split": (5.5, 0.9), "validate_raw": (9.8, 0.7),
                   "preprocess": (5.8, 0.8), "validate_processed": (6.8, 0.6)},
    "higgs": {"acquire": (33, 0.9), "split": (27, 5.8), "validate_raw": (46, 3.7),
              "preprocess": (72, 4.8), "validate_processed": (14, 4.1)},
    "aliexpress_tenth": {"acquire": (15, 1.4), "split": (12, 1.9), "validate_raw": (19, 1.6),
                         "preprocess": (37, 2.7), "validate_processed": (15, 1.5)},
    "aliexpress": {"acquire": (106, 2.3), "split": (75, 17.1), "validate_raw": (96, 11.9),
                   "preprocess": None, "validate_processed": None},
}


def _meminfo(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def _rss_gb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return 0.0


def _tree_rss_gb(pid: int, cpu: dict[int, float] | None = None) -> float:
    """Resident memory of `pid` and every process below it (preprocess's fork server and workers), summed;
    each one's CPU seconds so far go into `cpu`."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
            if cpu is not None:
                t = p.cpu_times()
                cpu[p.pid] = max(cpu.get(p.pid, 0.0), t.user + t.system)
        except psutil.Error:
            pass
    return total / 1024**3


def stage_command(stage: str, name: str, work: Path, params: Path) -> list[str]:
    """dvc.yaml's command of `stage@name`, its paths under `work`."""
    d = {k: str(work / k / name) for k in ("raw", "splits", "processed")}
    common = ["--params", str(params)]
    verdict_raw, verdict = work / "validated" / f"{name}.raw.json", work / "validated" / f"{name}.json"
    gx = ["--context", str(work / "gx"), "--report", str(work / "reports")]
    args = {
        "acquire": ["--dataset", name, "--out", d["raw"]],
        "split": ["--dataset", name, "--raw", d["raw"], "--out", d["splits"]],
        "validate_raw": ["--dataset", name, "--splits", d["splits"], "--out", str(verdict_raw), *gx],
        "preprocess": ["--dataset", name, "--splits", d["splits"], "--out", d["processed"]]
        + (["--verdict", str(verdict_raw)] if verdict_raw.exists() else []),
        "validate_processed": ["--processed", d["processed"], "--out", str(verdict), *gx],
    }[stage]
    return [sys.executable, "-m", f"stages.{stage}", *common, *args]


def run_stage(cmd: list[str], log: Path, kill_above_gb: float, repo: Path = ROOT) -> dict[str, Any]:
    """Run `cmd` in checkout `repo`; its wall and CPU seconds (its own, and its process tree's: preprocess's
    workers), peak RSS (GB), exit status, and whether it was stopped for memory."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    before = os.times()
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
    done, stopped = threading.Event(), threading.Event()
    tree_peak = [0.0]
    tree_cpu: dict[int, float] = {}

    def watch() -> None:
        while not done.wait(0.2):
            tree_peak[0] = max(tree_peak[0], _tree_rss_gb(proc.pid, tree_cpu))
            if _rss_gb(proc.pid) > kill_above_gb:
                stopped.set()
                proc.kill()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    done.set()
    watcher.join()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped here (wait4 gives the child's own rusage)
    # the process tree's: the children's times of the stage and of every process below it that its parent
    # waited for, or the sum sampled every 0.2 s (a fork server is not always waited for) where larger
    after = os.times()
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "cpu_seconds_tree": round(max(after.children_user + after.children_system - before.children_user
                                      - before.children_system, sum(tree_cpu.values())), 1),
        # the stage's process (wait4), or its process tree summed (sampled every 0.2 s) where that is larger
        "peak_rss_gb": round(max(usage.ru_maxrss / 1024**2, tree_peak[0]), 2),
        "peak_rss_gb_process": round(usage.ru_maxrss / 1024**2, 2),
        "peak_rss_gb_tree_sampled": round(tree_peak[0], 2),
        "exit": code,
        "stopped_above_gb": kill_above_gb if stopped.is_set() else None,
    }


def sizes(name: str, scale: float) -> dict[str, int]:
    return {k: int(round(n * scale)) for k, n in get_schema(name).real_rows.items()}


def _prepare(name: str, scale: float, work: Path, repo: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    params = read_yaml(repo / "params.yaml")  # a mapping to write a changed copy from
    # the other datasets stay (params.yaml's validation.policy and run groups name them); stages take --dataset
    params["datasets"][name]["source"] = "standin"
    params["datasets"][name]["standin"]["rows"] = sizes(name, scale)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


# what no stage after the key reads, removed after it without --keep
_SPENT = {"split": "raw", "preprocess": "splits"}


def run_dataset(name: str, scale: float, work: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Every stage at `scale`: this checkout's, each one after --against's where given."""
    checkouts = {"this": (ROOT, work)} if a.against is None else {
        "against": (a.against.resolve(), work / "against"), "this": (ROOT, work / "this")}
    for repo, w in checkouts.values():
        _prepare(name, scale, w, repo)
    out: dict[str, Any] = {"rows": sizes(name, scale), "stages": {}}
    if a.against is not None:
        out["against"] = {"repo": str(a.against), "commit": git_commit(a.against), "stages": {}}
    failed: set[str] = set()
    for stage in STAGES:
        for who, (repo, w) in checkouts.items():
            if who in failed:
                continue
            if scale >= 1.0:
                waited = 0.0
                while _meminfo("MemAvailable") < a.min_free_gb and waited < 600:
                    time.sleep(10)
                    waited += 10
            log = w / f"{stage}.log"
            r = run_stage(stage_command(stage, name, w, w / "params.yaml"), log, a.kill_above_gb, repo)
            r["mem_available_gb_after"] = round(_meminfo("MemAvailable"), 1)
            (out if who == "this" else out["against"])["stages"][stage] = r
            print(f"{name} x{scale:g} {stage}{'' if who == 'this' else ' (against)'}: {r['seconds']} s "
                  f"(cpu {r['cpu_seconds']} s, tree {r['cpu_seconds_tree']} s), peak {r['peak_rss_gb']} GB, "
                  f"exit {r['exit']}", flush=True)
            if r["exit"] != 0:
                r["tail"] = log.read_text()[-1500:]
                if stage in ("acquire", "split", "preprocess"):
                    failed.add(who)
            if stage == "split":
                info = w / "splits" / name / "info.json"
                if who == "this":
                    out["split_rows"] = json.loads(info.read_text())["n_rows"] if info.exists() else None
            if stage in _SPENT and not a.keep:
                shutil.rmtree(w / _SPENT[stage], ignore_errors=True)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _cells(run: dict[str, Any]) -> list[str]:
    cells = []
    for stage in STAGES:
        r = run["stages"].get(stage)
        if r is None:
            cells.append("—")
            continue
        busy = r.get("cpu_seconds_tree", r["cpu_seconds"]) / r["seconds"] if r["seconds"] else 0.0
        cell = f"{r['seconds']:g} s, {r['peak_rss_gb']:g} GB (x{busy:.1f})"
        cells.append(cell if r["exit"] == 0 else f"**failed ({r['exit']})** {cell}")
    return cells


def markdown(record: dict[str, Any]) -> str:
    m = record["machine"]
    lines = [
        "# Data stages at the paper's sizes (benchmarks/data_scale.py)",
        "",
        f"Commit {record['commit']}; {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; load average "
        f"{record['load_average_at_start']} at start, {record['load_average_at_end']} at end. "
        f"{record['note']}",
        "",
        "Per stage: wall seconds, peak resident memory of the stage's process, or of its process tree where that "
        "is larger (CPU seconds of the stage's process tree / wall seconds: the cores it kept busy). A row "
        "named by a commit is --against's checkout, run right before the row below it. Growth: peak at full "
        "size / peak at a tenth.",
        "",
        "| dataset | rows | " + " | ".join(STAGES) + " |",
        "|---|---|" + "---|" * len(STAGES),
    ]
    for name, runs in record["datasets"].items():
        for label, run in runs.items():
            if label == "growth":
                continue
            rows = " + ".join(f"{n:,}" for n in run["rows"].values())
            if "against" in run:
                lines.append(f"| {name} ({label}, {run['against']['commit'][:7]}) | {rows} | "
                             + " | ".join(_cells(run["against"])) + " |")
            lines.append(f"| {name} ({label}) | {rows} | " + " | ".join(_cells(run)) + " |")
        if "growth" in runs:
            lines.append(f"| {name}: growth | | " + " | ".join(
                f"x{runs['growth'].get(s, float('nan')):.2f}" for s in STAGES) + " |")
    lines += ["", "Before (issue 51, the code that held whole tables; s, GB):", ""]
    for name, stages in BEFORE.items():
        lines.append(f"- {name}: " + ", ".join(
            f"{s} " + ("did not finish" if v is None else f"{v[0]:g} s, {v[1]:g} GB") for s, v in stages.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: all three)")
    p.add_argument("--scales", default="0.1,1", help="fractions of the published sizes (default: 0.1,1)")
    p.add_argument("--workdir", type=Path, default=ROOT / "data" / "benchmark_data_scale")
    p.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--kill-above-gb", type=float, default=12.0, help="stop a stage whose RSS passes this")
    p.add_argument("--min-free-gb", type=float, default=10.0, help="available memory a full-size stage waits for")
    p.add_argument("--against", type=Path, default=None,
                   help="another checkout whose stages run right before this one's (see the docstring)")
    p.add_argument("--note", default="", help="a sentence for the record (e.g. whether the machine was quiet)")
    a = p.parse_args(argv)
    scales = [float(s) for s in a.scales.split(",")]
    record: dict[str, Any] = {
        "what": "the data stages on stand-ins at fractions of the paper's sizes; see the docstring",
        "commit": git_commit(ROOT),
        "machine": {"cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)),
                    "memory_gb": round(_meminfo("MemTotal"), 1), "python": platform.python_version()},
        "load_average_at_start": round(os.getloadavg()[0], 2),
        "note": a.note,
        "bars": BARS,
        "before_issue_51": BEFORE,
        "datasets": {},
    }
    t0 = time.perf_counter()
    for name in a.datasets.split(","):
        runs: dict[str, Any] = {}
        for scale in scales:
            runs["full" if scale == 1.0 else f"x{scale:g}"] = run_dataset(name, scale, a.workdir / name, a)
        if "full" in runs and "x0.1" in runs:
            full, tenth = runs["full"]["stages"], runs["x0.1"]["stages"]
            runs["growth"] = {s: round(full[s]["peak_rss_gb"] / tenth[s]["peak_rss_gb"], 2)
                              for s in STAGES if s in full and s in tenth}
        record["datasets"][name] = runs
    record["load_average_at_end"] = round(os.getloadavg()[0], 2)
    record["wall_seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(record, indent=2) + "\n"
    print(markdown(record))
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".json").write_text(text)
        a.out.with_suffix(".md").write_text(markdown(record))
        print(f"wrote {a.out.with_suffix('.json')} and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
