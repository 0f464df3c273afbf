"""How often parallel `dvc repro --single-item` runs on one repository fail on DVC's locks, with and without
`--wait-for-lock` (the option flows.pipeline uses), and whether dvc.lock stays consistent.

    python benchmarks/dvc_lock_contention.py [--stages 24] [--out FILE]

A toy repository gets N independent stages that each write one small file; all N are started at once,
first without and then with `--wait-for-lock`. Reports failures, lock errors, wall time and `dvc status`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOCK_MESSAGES = ("Unable to acquire lock", "is busy, it is being blocked by")


def measure(root: Path, n: int, wait: bool) -> dict[str, object]:
    (root / "dvc.lock").unlink(missing_ok=True)
    for i in range(n):
        (root / f"out{i}").unlink(missing_ok=True)
    flag = ["--wait-for-lock"] if wait else []
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dvc", *flag, "repro", "--single-item", f"s{i}"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(n)
    ]
    outputs = [p.communicate()[0] for p in procs]
    seconds = time.monotonic() - t0
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        "wait_for_lock": wait,
        "failed": sum(p.returncode != 0 for p in procs),
        "lock_errors": sum(any(m in out for m in LOCK_MESSAGES) for out in outputs),
        "wall_seconds": round(seconds, 1),
        "stale_after": sorted(json.loads(status or "{}")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, default=24)
    parser.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "dvc_lock_contention.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dvc-lock-") as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
        stages = {
            f"s{i}": {
                "cmd": f"{sys.executable} -c \"import pathlib; pathlib.Path('out{i}').write_text('{i}' * 1000)\"",
                "outs": [f"out{i}"],
            }
            for i in range(args.stages)
        }
        (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
        runs = [measure(root, args.stages, wait) for wait in (False, True)]
    report = {"stages": args.stages, "runs": runs}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".tmp").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".tmp").replace(out)
    print(json.dumps(report, indent=2))
    return 0 if runs[1]["failed"] == 0 and not runs[1]["stale_after"] else 1


if __name__ == "__main__":
    sys.exit(main())
