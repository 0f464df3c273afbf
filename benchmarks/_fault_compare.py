"""How benchmarks/fault_injection.py compares the clean run's outputs with the faulty run's: timings may
differ, results may not (JSON compared without its timing keys, figures without their stamps, checkpoints
tensor by tensor). A module beside the script, not a script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
