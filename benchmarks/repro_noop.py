"""A `make repro` with nothing to do (`python -m flows.pipeline`) against a plain `dvc repro`, in one run.

    python benchmarks/repro_noop.py [--root .] [--stages 60] [--repeats 3] [--out FILE]

With `--root`, times both on that DVC project as it is (it should be fully reproduced: `dvc status`
clean, e.g. the default DAG after `make repro`). Without it, builds a reduced project in a temporary
folder: a foreach of `--stages` items in three layers (acquire-like, split-like, train-like stages that
each read their upstream's file), reproduces it once, then times the no-ops. Reports the median of
`--repeats` runs of each and the ratio flows.pipeline / dvc repro (goal: <= 2). Both are timed as the
user runs them: a fresh Python process each, wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

ORCHESTRATION = {
    "workers": 2,
    "retries": 0,
    "retry_delay_seconds": 0.0,
    "gpu_concurrency": None,
    "gpu_stages": ["train"],
    "lock_retries": 20,
    "schedule": "0 3 * * *",
    "timezone": "UTC",
    "summary": "results/pipeline_summary.json",
    "sync_remote": False,
    "memory_budget_gb": None,
    "stage_memory": "results/stage_memory.json",
    "max_train_stages": 2000,
    "stage_server": True,
}


def build(root: Path, n: int) -> Path:
    """A git + DVC project with 3 x n stages (foreach over n items, three layers)."""
    root.mkdir(parents=True)
    items = [f"d{i:03d}" for i in range(n)]
    stages = {
        "acquire": {
            "foreach": items,
            "do": {"cmd": "python -c \"open('out/a_${item}', 'w').write('${item}')\"", "outs": ["out/a_${item}"]},
        },
        "split": {
            "foreach": items,
            "do": {
                "cmd": "python -c \"open('out/s_${item}', 'w').write(open('out/a_${item}').read() + 's')\"",
                "deps": ["out/a_${item}"],
                "outs": ["out/s_${item}"],
            },
        },
        "train": {
            "foreach": items,
            "do": {
                "cmd": "python -c \"open('out/t_${item}', 'w').write(open('out/s_${item}').read() + 't')\"",
                "deps": ["out/s_${item}"],
                "outs": ["out/t_${item}"],
            },
        },
    }
    (root / "out").mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True, env=env)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestration": ORCHESTRATION}, sort_keys=False))
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q"], cwd=root, check=True, env=env)
    return root


def timed(cmd: list[str], root: Path, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return seconds, proc.stdout


def measure(root: Path, repeats: int) -> dict[str, object]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"], cwd=root, env=env, capture_output=True, text=True
    )
    stale = json.loads(status.stdout or "{}") if status.returncode == 0 else None
    if stale:
        raise SystemExit(f"{root}: not fully reproduced (`dvc status`: {sorted(stale)[:5]} ...); a no-op needs that")
    dvc_cmd = [sys.executable, "-m", "dvc", "repro"]
    flow_cmd = [sys.executable, "-m", "flows.pipeline", "--root", str(root)]
    dvc_s, flow_s = [], []
    flow_out = ""
    for _ in range(repeats):  # interleaved, so a busy machine slows both alike
        dvc_s.append(timed(dvc_cmd, root, env)[0])
        seconds, flow_out = timed(flow_cmd, root, env)
        flow_s.append(seconds)
    n_stages = len(json.loads((root / "results" / "pipeline_summary.json").read_text())["stages"])
    dvc_med, flow_med = statistics.median(dvc_s), statistics.median(flow_s)
    return {
        "stages": n_stages,
        "repeats": repeats,
        "dvc_repro_seconds": [round(s, 2) for s in dvc_s],
        "flows_pipeline_seconds": [round(s, 2) for s in flow_s],
        "dvc_repro_median": round(dvc_med, 2),
        "flows_pipeline_median": round(flow_med, 2),
        "ratio": round(flow_med / dvc_med, 2),
        "goal": "ratio <= 2",
        "flows_pipeline_said": flow_out.strip().splitlines()[-1] if flow_out.strip() else "",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, help="a fully reproduced DVC project (default: build a reduced one)")
    p.add_argument("--stages", type=int, default=60, help="foreach items of the reduced project (3 stages each)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="repro-noop-") as tmp:
        if a.root is not None:
            root, kind = a.root.resolve(), "given project"
        else:
            root, kind = build(Path(tmp) / "p", a.stages), f"reduced project ({3 * a.stages} stages)"
        result = {"project": kind, **measure(root, a.repeats)}
    print(json.dumps(result, indent=2))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    ratio = result["ratio"]
    return 0 if isinstance(ratio, float) and ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
