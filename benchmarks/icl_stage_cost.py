"""Wall and CPU seconds of the `icl` stage under a profile on the processed stand-ins, with released-size
models of random weights (cost does not depend on the values: these runs measure cost only and produce no
metric anyone should read; the records are written to a scratch folder and discarded).

    python benchmarks/icl_stage_cost.py [--params params.yaml] [--data data/processed] [--profile cpu]
        [--datasets NAME ...] [--out results/benchmarks/icl_stage_cpu.json]

The checkpoints (Orion-MSP's released config, TabICL's classifier and regressor at the package's default
architecture) are written once to .cache/benchmarks/icl and locked in a scratch icl.lock; the stage then runs
as dvc.yaml runs it, in a child process, under the params' `icl` section with `profile` set as asked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from multitab.runtime.provenance import cpu_model, git_commit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def checkpoints(folder: Path) -> dict[str, Path]:
    import torch
    from tabicl._model import TabICL

    from multitab.icl.orion_msp import OrionMSP

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    made = {"orion_msp": lambda: {"config": {}, "state_dict": OrionMSP().state_dict()},
            "tabicl": lambda: {"config": {}, "state_dict": TabICL().state_dict()},
            "tabicl_regressor": lambda: {"config": {"max_classes": 0},
                                         "state_dict": TabICL(max_classes=0).state_dict()}}
    paths = {}
    for name, make in made.items():
        paths[name] = folder / f"{name}_random.ckpt"
        if not paths[name].exists():
            torch.save(make(), paths[name])
    return paths


def main(argv: list[str] | None = None) -> int:
    import yaml

    from multitab.config import read_yaml
    from multitab.icl import lock

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", default=str(ROOT / "params.yaml"))
    p.add_argument("--data", default=str(ROOT / "data" / "processed"))
    p.add_argument("--profile", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--datasets", nargs="+", default=None, help="of icl.datasets (default: all of them)")
    p.add_argument("--out", default=str(ROOT / "results" / "benchmarks" / "icl_stage_cpu.json"))
    args = p.parse_args(argv)
    files = checkpoints(ROOT / ".cache" / "benchmarks" / "icl")
    raw = read_yaml(args.params)
    raw["icl"]["profile"] = args.profile
    if args.datasets:
        raw["icl"]["datasets"] = args.datasets
    with tempfile.TemporaryDirectory(prefix="icl-stage-cost-") as scratch:
        work = Path(scratch)
        (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        entries = {}
        for name, path in files.items():
            wanted = raw["icl"]["checkpoints"][name]
            entries[name] = lock.LockedCheckpoint(
                hub_repo=wanted["hub_repo"], hub_file=wanted["hub_file"], revision=None, source=str(path),
                path=str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest(), checked_against="first fetch")
        lock.write(work / "icl.lock", entries)
        cmd = [sys.executable, "-m", "stages.icl", "--params", str(work / "params.yaml"), "--data", args.data,
               "--synthetic", str(work / "synthetic"), "--lock", str(work / "icl.lock"), "--out", str(work / "out")]
        load = os.getloadavg()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        records = [json.loads(f.read_text()) for f in sorted((work / "out").rglob("metrics.json"))]
    per_run = [{"dataset": r["dataset"], "model": r["model"], "seconds": round(r["seconds"], 1),
                "profile": r["profile"], "device": r["device"], "context_rows": r["context"]["rows_used"],
                "scored_rows": r["eval_rows"]["splits"], "chunk_size": r["chunk_size"],
                "n_estimators": r["n_estimators"], "tasks_run": sum(v == "ok" for v in r["status"].values())}
               for r in records]
    # the data it ran on: each split file's sha256 (the stand-ins' bytes depend on their generator's code)
    data = {name: {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                   for f in sorted((Path(args.data) / name).glob("*")) if f.is_file()}
            for name in raw["icl"]["datasets"]}
    result = {"what": "icl stage, released-size random-weight models (cost only)", "profile": args.profile,
              "datasets": raw["icl"]["datasets"],
              "profile_settings": raw["icl"]["profiles"][args.profile], "orion": raw["icl"]["orion"],
              "commit": git_commit(ROOT), "data": data,
              "wall_seconds": round(wall, 1), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
              "peak_rss_gb": round(usage.ru_maxrss * 1024 / 1e9, 2), "load_average_at_start": load,
              "load_average_at_end": os.getloadavg(), "cpu": cpu_model() or platform.machine(),
              "cores": os.cpu_count(), "torch_threads": "torch default (the stage's)", "runs": per_run}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
