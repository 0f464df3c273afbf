"""One-off: let the 20-epoch study's checkpoints continue under a 40-epoch cap, at this commit's code.

The study (results/study/multitab_bench_n100k_3seeds) was trained at commit f2944a5, whose checkpoints are
resumed only when every setting is equal, `max_epochs` included. main later gained the epoch-budget rule
(src/multitab/training/checkpoint.py `budget_only`): a checkpoint that differs from the run in `max_epochs`
alone, and whose epoch is within the new budget, continues. Adding that rule to this commit would change
the training code's hash, which is part of every checkpoint's settings, and so make all of them foreign.
This script applies the same rule to the files instead: for each last.pt / best.pt under the given folder
whose stored settings give `max_epochs` OLD and whose fingerprint is the hash of those settings, it
rewrites `max_epochs` to NEW and the fingerprint to the hash of the new settings. Nothing else changes:
weights, optimizer, RNG and early-stopping states, history. A run that stopped early stays stopped
(`stopped` is kept); a run at the old cap trains on. Files are read with weights_only=True (no code runs)
and replaced atomically.

    python tools/extend_study_budget.py results/study_checkpoints --old 20 --new 40
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
from pathlib import Path

import torch


def _hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def extend(path: Path, old: int, new: int) -> str:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    settings = json.loads(payload["settings"])
    if _hash(settings) != payload["fingerprint"]:
        return "skipped: its fingerprint is not the hash of its stored settings"
    if settings.get("max_epochs") != old:
        return f"skipped: max_epochs is {settings.get('max_epochs')}, not {old}"
    if int(payload["epoch"]) > new:
        return f"skipped: epoch {int(payload['epoch'])} is beyond the new cap"
    settings["max_epochs"] = new
    payload["settings"] = json.dumps(settings, sort_keys=True, default=str)
    payload["fingerprint"] = _hash(settings)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    tmp = path.with_name(path.name + ".extend-tmp")
    tmp.write_bytes(buffer.getbuffer())
    os.replace(tmp, path)
    return f"extended (epoch {int(payload['epoch'])}{', stopped early' if payload.get('stopped') else ''})"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root", type=Path)
    p.add_argument("--old", type=int, required=True)
    p.add_argument("--new", type=int, required=True)
    a = p.parse_args()
    counts: dict[str, int] = {}
    for path in sorted(a.root.rglob("*.pt")):
        what = extend(path, a.old, a.new)
        key = what.split(" (")[0].split(":")[0]
        counts[key] = counts.get(key, 0) + 1
        if not what.startswith("extended"):
            print(f"{path}: {what}")
    print(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
