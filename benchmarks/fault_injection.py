"""Fault injection: run a DVC DAG through flows.pipeline while stage attempts fail at random and a
training stage is SIGKILLed mid-run; check that every stage completes with the same results as a clean run.

    python benchmarks/fault_injection.py [ROOT] [--fail-rate 0.2] [--kill-stage 'train@*'] [--kill-after 2]
                                         [--retries 6] [--workers N] [--seed 0] [--out FILE]

ROOT is a DVC project (a git checkout); without it a small toy DAG is built (prepare -> features@x ->
train@x with checkpoints -> aggregate). The project's files (`git ls-files`, plus untracked files not
ignored) are copied twice into a temporary folder: one copy runs clean (no retries), the other runs with
faults. Both must record the same stages and commands in dvc.lock, every output file of the clean run
must be equal in the faulty one (byte for byte, or apart from timings: training seconds, samples/s and
the epoch a killed run resumed from, which differ between any two runs; checkpoints are compared tensor
by tensor), and `dvc status` of the faulty copy must be clean. `dvc_lock_equal` (output hashes equal too)
holds for the toy DAG, whose outputs carry no timings.

The faults come from outside the pipeline: DVC runs every stage command as `$SHELL -c <cmd>`, so the faulty
run sets SHELL to a wrapper script (written here) that, per attempt, fails before or after running the
command with probability --fail-rate, and SIGKILLs the process group of the first attempt of the first
stage matching --kill-stage after --kill-after seconds. Nothing in flows/ or stages/ knows about it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

# siblings of this script, not packages: the projects it runs and the comparison of their results
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fault_compare import compare_results, resumed_runs  # noqa: E402
from _fault_projects import build_toy, copy_project  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

WRAPPER = '''#!{python}
"""A $SHELL for DVC that injects faults: invoked as `faultsh -c <cmd>`."""
import fcntl, fnmatch, json, os, random, signal, subprocess, sys, time

cmd = sys.argv[sys.argv.index("-c") + 1]
stage = os.environ.get("DVC_STAGE", "?")
log = os.environ["FAULT_LOG"]
with open(log, "a+") as f:  # attempt number of this stage (the log is shared by parallel stages)
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    attempt = 1 + sum(1 for line in f if json.loads(line)["stage"] == stage and json.loads(line)["event"] == "start")
    f.write(json.dumps({{"stage": stage, "event": "start", "attempt": attempt}}) + "\\n")


def note(event, **kw):
    with open(log, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({{"stage": stage, "event": event, "attempt": attempt, **kw}}) + "\\n")


rng = random.Random(f"{{os.environ['FAULT_SEED']}}:{{stage}}:{{attempt}}")
rate = float(os.environ["FAULT_RATE"])
fail = rng.random() < rate
where = rng.choice(["before", "after"])


def claim_kill():
    """True for the first matching attempt only (parallel stages race for it: O_EXCL decides)."""
    try:
        os.close(os.open(log + ".kill", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


if fnmatch.fnmatchcase(stage, os.environ["FAULT_KILL_STAGE"]) and claim_kill():
    proc = subprocess.Popen(["/bin/sh", "-c", cmd], start_new_session=True)
    try:
        rc = proc.wait(timeout=float(os.environ["FAULT_KILL_AFTER"]))
        note("kill_missed", rc=rc)  # the stage finished before the kill was due
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        note("sigkill")
        sys.exit(137)
    sys.exit(rc)
if fail and where == "before":
    note("fail_before")
    sys.exit(1)
rc = subprocess.call(["/bin/sh", "-c", cmd])
if rc == 0 and fail:
    note("fail_after")  # the command's outputs are written, but the attempt reports failure
    sys.exit(1)
note("done", rc=rc)
sys.exit(rc)
'''

def run_flow(root: Path, env: dict[str, str], args: list[str]) -> tuple[int, float, dict[str, Any], str]:
    """flows.pipeline on `root` in a child process; its output is kept (and echoed) for the report."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.pipeline", "--root", str(root), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        sys.stdout.write(line)
    proc.wait()
    seconds = time.monotonic() - t0
    summary_path = root / "results" / "pipeline_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return proc.returncode, seconds, summary, "".join(lines)


def read_lock(root: Path) -> dict[str, Any]:
    import yaml

    path = root / "dvc.lock"
    return yaml.safe_load(path.read_text())["stages"] if path.exists() else {}


def dvc_status(root: Path) -> dict[str, Any]:
    """`dvc status` of the stages a default flow run runs (the opt-in run groups are in dvc.yaml's DAG only while
    runs.yaml holds them, and a default run writes runs.yaml without them: multitab.runs)."""
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out or "{}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", help="DVC project to copy and run (default: a toy DAG)")
    parser.add_argument("--fail-rate", type=float, default=0.2)
    parser.add_argument("--kill-stage", default="train@*", help="shell pattern of the stage to SIGKILL once")
    parser.add_argument("--kill-after", type=float, default=1.5, help="seconds into that stage")
    parser.add_argument("--retries", type=int, default=6)
    parser.add_argument("--retry-delay", type=float, default=0.5)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--seed", help="fault seed (default: a fresh one, printed in the report)")
    parser.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "fault_injection.json"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument("--clean-from", help="a folder kept by --keep: take its clean run, run only the faulty one")
    parser.add_argument("--reuse", help="a folder kept by --keep: write the report from its two runs, run nothing")
    args = parser.parse_args(argv)
    seed = args.seed or str(secrets.randbelow(10**6))
    if args.reuse:
        return report_kept(Path(args.reuse), args)

    tmp = Path(tempfile.mkdtemp(prefix="fault-injection-"))
    source = Path(args.root).resolve() if args.root else tmp / "toy"
    if not args.root:
        build_toy(source)
    clean, faulty = tmp / "clean", tmp / "faulty"
    if args.clean_from:  # the kept clean run of the same commit stands in for a new one
        shutil.copytree(Path(args.clean_from) / "clean", clean, symlinks=True)
    for dst in (faulty,) if args.clean_from else (clean, faulty):
        dst.mkdir()
        if args.root:
            copy_project(source, dst)
        else:
            shutil.copytree(source, dst, dirs_exist_ok=True)
            subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
            subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=dst, check=True)

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    common = ["--retry-delay", str(args.retry_delay)] + (
        ["--workers", str(args.workers)] if args.workers else []
    )
    if args.clean_from:
        rc_clean, t_clean = 0, json.loads((clean / "results" / "pipeline_summary.json").read_text())["wall_seconds"]
    else:
        print(f"clean run in {clean}", flush=True)
        rc_clean, t_clean, _, _ = run_flow(clean, env, ["--retries", "0", *common])
    if rc_clean != 0:
        print(f"the clean run failed (exit {rc_clean}): fix the DAG first", file=sys.stderr)
        return 1

    wrapper = tmp / "faultsh"
    wrapper.write_text(WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    log = tmp / "faults.jsonl"
    fault_env = {
        **env,
        "SHELL": str(wrapper),
        "FAULT_LOG": str(log),
        "FAULT_RATE": str(args.fail_rate),
        "FAULT_SEED": seed,
        "FAULT_KILL_STAGE": args.kill_stage,
        "FAULT_KILL_AFTER": str(args.kill_after),
    }
    print(f"faulty run in {faulty} (SHELL={wrapper})", flush=True)
    rc, t_faulty, s_faulty, output = run_flow(faulty, fault_env, ["--retries", str(args.retries), *common])

    return write_report(tmp, args, seed, rc, t_clean, t_faulty, s_faulty, output)


def report_kept(tmp: Path, args: argparse.Namespace) -> int:
    """The report of a kept folder (times: the pipelines' own wall time, without the flow's start-up)."""
    s_clean, s_faulty = (
        json.loads((tmp / run / "results" / "pipeline_summary.json").read_text()) for run in ("clean", "faulty")
    )
    seed = args.seed or "unknown (see the run's log)"
    rc = 1 if s_faulty.get("failed") else 0
    return write_report(tmp, args, seed, rc, s_clean["wall_seconds"], s_faulty["wall_seconds"], s_faulty, "")


def write_report(
    tmp: Path, args: argparse.Namespace, seed: str, rc: int, t_clean: float, t_faulty: float,
    s_faulty: dict[str, Any], output: str,
) -> int:
    clean, faulty, log = tmp / "clean", tmp / "faulty", tmp / "faults.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    count = {
        e: sum(1 for x in events if x["event"] == e)
        for e in ("start", "fail_before", "fail_after", "sigkill")
    }
    # Same stages, commands, deps and output hashes (the order of entries follows completion order).
    lock_clean, lock_faulty = (read_lock(root) for root in (clean, faulty))
    status = dvc_status(faulty)
    results = compare_results(clean, faulty, lock_clean, lock_faulty)
    same_results = (
        bool(lock_clean)
        and results["same_stages_and_commands"]
        and not results["different"]
        and not results["missing_in_faulty"]
        and not results["extra_in_faulty"]
    )
    killed = sorted({x["stage"] for x in events if x["event"] == "sigkill"})
    resumed = resumed_runs(faulty, lock_faulty)
    report = {
        "root": str(args.root or "toy DAG"),
        "stages": len(s_faulty.get("stages", {})),
        "fail_rate": args.fail_rate,
        "seed": seed,
        "command_attempts": count["start"],
        "injected_failures": count["fail_before"] + count["fail_after"],
        "injected_before_command": count["fail_before"],
        "injected_after_command": count["fail_after"],
        "sigkilled_stages": killed,
        # the toy's message, or training runs whose metrics.json says they resumed from a checkpoint
        "resumed_from_checkpoint": output.count("resumed from the checkpoint") + len(resumed),
        "resumed_runs": resumed,
        "flow_attempts": s_faulty.get("attempts"),
        "retried_stages": s_faulty.get("retried"),
        "failed_stages": s_faulty.get("failed"),
        "lock_waits": s_faulty.get("lock_waits"),
        "exit_code": rc,
        "wall_seconds_clean": round(t_clean, 1),
        "wall_seconds_faulty": round(t_faulty, 1),
        "dvc_lock_equal": lock_clean == lock_faulty and bool(lock_clean),
        "dvc_lock_stages": len(lock_faulty),
        "dvc_status_faulty": status,
        "results": results,
        "same_results": same_results,
        # Nothing was tested unless faults were injected: a draw without any counts as a failed check.
        "ok": rc == 0
        and same_results
        and status == {}
        and bool(killed)
        and count["fail_before"] + count["fail_after"] > 0,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp_out = Path(args.out).with_suffix(".tmp")
    tmp_out.write_text(json.dumps(report, indent=2) + "\n")
    tmp_out.replace(args.out)
    print(textwrap.indent(json.dumps(report, indent=2), "  "))
    if not args.keep and not args.reuse:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept {tmp}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
