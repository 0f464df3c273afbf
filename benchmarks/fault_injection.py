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

from multitab.config import read_yaml

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

ITEMS = "abcdef"
TOY_STAGES: dict[str, Any] = {
    "prepare": {
        "cmd": "python toy.py prepare",
        "deps": ["toy.py"],
        "params": [{"toy.yaml": ["rows"]}],  # its own file: params.yaml holds only known sections
        "outs": ["data/raw.json"],
    },
    "features": {
        "foreach": list(ITEMS),
        "do": {
            "cmd": "python toy.py features ${item}",
            "deps": ["toy.py", "data/raw.json"],
            "outs": ["data/features_${item}.json"],
        },
    },
    "train": {
        "foreach": list(ITEMS),
        "do": {
            "cmd": "python toy.py train ${item}",
            "deps": ["toy.py", "data/features_${item}.json"],
            "params": [{"toy.yaml": ["epochs"]}],
            "outs": ["results/model_${item}.json"],
        },
    },
    "aggregate": {
        "cmd": "python toy.py aggregate",
        "deps": ["toy.py", *(f"results/model_{m}.json" for m in ITEMS)],
        "metrics": [{"results/summary.json": {"cache": False}}],
    },
}

TOY_SCRIPT = '''"""Toy stages: deterministic, with a training loop that checkpoints every epoch and resumes."""
import json, pathlib, sys, time, yaml

params = yaml.safe_load(open("toy.yaml"))
step, arg = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
if step == "prepare":
    pathlib.Path("data").mkdir(exist_ok=True)
    json.dump([(i * 7919) % 1000 for i in range(params["rows"])], open("data/raw.json", "w"))
elif step == "features":
    raw = json.load(open("data/raw.json"))
    k = "abcdef".index(arg) + 2
    json.dump([x * k % 997 for x in raw], open(f"data/features_{arg}.json", "w"))
elif step == "train":
    xs = json.load(open(f"data/features_{arg}.json"))
    ckpt = pathlib.Path(f"checkpoints/{arg}.json")  # outside DVC's outs: survives a killed attempt
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"epoch": 0, "w": 0.0}
    if state["epoch"]:
        print(f"train@{arg}: resumed from the checkpoint of epoch {state['epoch']}", flush=True)
    while state["epoch"] < params["epochs"]:
        time.sleep(params["epoch_seconds"])
        state = {"epoch": state["epoch"] + 1, "w": round(state["w"] * 0.5 + sum(xs) / len(xs), 6)}
        ckpt.parent.mkdir(exist_ok=True)
        tmp = ckpt.with_suffix(".tmp"); tmp.write_text(json.dumps(state)); tmp.replace(ckpt)
    pathlib.Path("results").mkdir(exist_ok=True)
    json.dump({"w": state["w"], "epochs": state["epoch"]}, open(f"results/model_{arg}.json", "w"))
    ckpt.unlink()
elif step == "aggregate":
    models = {m: json.load(open(f"results/model_{m}.json")) for m in "abcdef"}
    json.dump({m: v["w"] for m, v in models.items()}, open("results/summary.json", "w"), sort_keys=True)
'''


def build_toy(root: Path) -> None:
    import yaml

    root.mkdir(parents=True)
    (root / "toy.py").write_text(TOY_SCRIPT)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": TOY_STAGES}, sort_keys=False))
    orchestration = read_yaml(REPO / "params.yaml")["orchestration"]
    (root / "toy.yaml").write_text(yaml.safe_dump({"rows": 2000, "epochs": 6, "epoch_seconds": 0.5}))
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestration": orchestration}, sort_keys=False))
    (root / ".gitignore").write_text("/checkpoints/\n")


def copy_project(src: Path, dst: Path) -> None:
    """The files git would see (tracked, plus untracked not ignored), into a fresh git + DVC repo."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        if (src / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)
    (dst / "dvc.lock").unlink(missing_ok=True)  # both runs start from nothing
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    if not (dst / ".dvc").is_dir():
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=dst, check=True)
    # A commit, as in a clone: dvclive (training stages) reads HEAD and fails in a repository without one.
    git_env = {**os.environ, "GIT_AUTHOR_NAME": "fault-injection", "GIT_AUTHOR_EMAIL": "fi@localhost",
               "GIT_COMMITTER_NAME": "fault-injection", "GIT_COMMITTER_EMAIL": "fi@localhost"}
    subprocess.run(["git", "add", "-A"], cwd=dst, check=True, env=git_env)
    subprocess.run(["git", "commit", "-q", "-m", "snapshot"], cwd=dst, check=True, env=git_env)


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
    """`dvc status` of the stages a default flow run runs: opt-in stages (`meta: {opt_in: true}`, the
    study profile) are never run by it and would always read as changed."""
    from flows.pipeline import read_stage_graph, select

    plan = read_stage_graph(root)
    targets = list(select(plan, None).order) if plan.opt_in else []
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json", *targets],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out or "{}")


# What records how a run went rather than what it computed: timings, and the epoch a killed run resumed
# from. Files and JSON keys matching these may differ between the clean and the faulty run.
VOLATILE_KEYS = {"resumed_from_epoch", "load_average"}
VOLATILE_FILE_STEMS = {"epoch_seconds", "data_seconds", "samples_per_second"}


def _volatile(key: object) -> bool:
    return isinstance(key, str) and (key in VOLATILE_KEYS or "seconds" in key or "per_second" in key)


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not _volatile(k)}
    if isinstance(obj, list | tuple):
        return [_strip(v) for v in obj]
    return obj


def _equal(a: Any, b: Any) -> bool:
    """Deep equality with tensors compared exactly (bit for bit, NaN equal to NaN)."""
    import numpy as np
    import torch

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):  # e.g. numpy's RNG state in a checkpoint
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _svg_content(path: Path) -> str:
    import re

    text = re.sub(r"\s*<dc:date>[^<]*</dc:date>", "", path.read_text())
    ids: dict[str, str] = {}  # element ids renamed in order of appearance
    return re.sub(r"\b(p[0-9a-f]{10}|m[0-9a-f]{10})\b", lambda m: ids.setdefault(m.group(1), f"id{len(ids)}"), text)


def compare_file(a: Path, b: Path) -> str:
    """'identical', 'equal apart from timings' or 'different'."""
    if a.read_bytes() == b.read_bytes():
        return "identical"
    if a.stem in VOLATILE_FILE_STEMS:
        return "equal apart from timings"
    if a.suffix == ".json":
        same = _strip(json.loads(a.read_text())) == _strip(json.loads(b.read_text()))
    elif a.suffix == ".svg":  # matplotlib stamps a date and random element ids (figures.py now fixes both)
        same = _svg_content(a) == _svg_content(b)
    elif a.suffix == ".pt":  # checkpoints: weights, optimizer and RNG states, history
        import torch

        try:  # weights_only: a checkpoint is data; one that needs code to load is refused (and differs)
            same = _equal(*(_strip(torch.load(p, map_location="cpu", weights_only=True)) for p in (a, b)))
        except Exception as e:  # torch raises several types for corrupt or refused files
            print(f"{a.name}: cannot compare ({type(e).__name__}: {str(e).strip().splitlines()[0][:200]})")
            same = False
    else:
        same = False
    return "equal apart from timings" if same else "different"


def out_files(root: Path, lock: dict[str, Any]) -> set[str]:
    files: set[str] = set()
    for entry in lock.values():
        for out in entry.get("outs", []):
            path = root / out["path"]
            if path.is_dir():
                files.update(str(p.relative_to(root)) for p in path.rglob("*") if p.is_file())
            else:
                files.add(out["path"])
    return files


def resumed_runs(root: Path, lock: dict[str, Any]) -> list[str]:
    """Training runs (metrics.json outputs) that resumed from a checkpoint, with the epoch."""
    found = []
    for rel in sorted(out_files(root, lock)):
        if rel.endswith("metrics.json"):
            epoch = json.loads((root / rel).read_text()).get("resumed_from_epoch") or 0
            if isinstance(epoch, int) and epoch > 0:
                found.append(f"{rel} (after epoch {epoch})")
    return found


def compare_results(
    clean: Path, faulty: Path, lock_clean: dict[str, Any], lock_faulty: dict[str, Any]
) -> dict[str, Any]:
    """The same stages and commands, and every output of the clean run equal in the faulty one (exactly,
    or apart from timings: train seconds, samples/s, the epoch a killed run resumed from)."""
    same_stages = lock_clean.keys() == lock_faulty.keys() and all(
        lock_clean[k].get("cmd") == lock_faulty[k].get("cmd") for k in lock_clean
    )
    files_clean, files_faulty = out_files(clean, lock_clean), out_files(faulty, lock_faulty)
    verdicts = {rel: compare_file(clean / rel, faulty / rel) for rel in sorted(files_clean & files_faulty)}
    return {
        "same_stages_and_commands": same_stages,
        "output_files": len(verdicts),
        "identical": sum(v == "identical" for v in verdicts.values()),
        "equal_apart_from_timings": sum(v == "equal apart from timings" for v in verdicts.values()),
        "different": [k for k, v in verdicts.items() if v == "different"],
        "missing_in_faulty": sorted(files_clean - files_faulty),
        "extra_in_faulty": sorted(files_faulty - files_clean),
    }


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
