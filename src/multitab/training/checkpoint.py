"""Checkpoints written atomically and durably every epoch, so a killed run loses at most the epoch in
progress, and read without running code.

`last.pt` holds everything needed to continue exactly: model and optimizer states, every RNG state (torch
CPU and CUDA, numpy, Python, and the generator that shuffles the batches), the number of finished
epochs, the early-stopping state, the per-epoch history, the last epoch's validation metrics and the time
spent so far. `best.pt` holds the weights of the best epoch (the ones tested). Both carry a fingerprint
of every setting that changes the numbers (see `multitab.training.run`) and those settings as JSON: a
checkpoint of other settings is never resumed (a warning names what changed; training starts over).
The one exception is the epoch budget (`max_epochs`): nothing in an epoch depends on it, so a checkpoint
that differs from the run's settings in `max_epochs` alone, and has not gone past the new budget, continues
under it (`budget_only`). Raising the cap then trains on only the runs that reached it; a run that stopped
early stays stopped, as it would have under the new cap.

Safety: checkpoints travel between machines (DVC remotes), so a checkpoint is untrusted input. Only
tensors, numbers, strings, lists, tuples and dicts are stored (`save` checks), and `torch.load` runs with
`weights_only=True` (multitab.files.checkpoint, shared with the pretrained models' checkpoints): a file that
needs any other Python object (a pickled callable) is refused before anything in it runs. An unreadable
`best.pt` (truncated, corrupt, refused, a directory) is rebuilt from `last.pt` when the last epoch was the
best one, otherwise the run retrains from scratch; `resume` says which.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multitab.files.checkpoint import CheckpointError, load_plain
from multitab.files.io import remove_stale_temporaries, write_bytes

log = logging.getLogger(__name__)

LAST = "last.pt"
BEST = "best.pt"


def fingerprint(settings: dict[str, Any]) -> str:
    """A stable hash of JSON-serialisable run settings (data hashes, model, optimiser, seed ...)."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def identity(run_fingerprint: str, settings: dict[str, Any] | None) -> dict[str, Any]:
    """The keys every checkpoint starts with: the fingerprint and (to explain a mismatch) the settings."""
    return {"fingerprint": run_fingerprint,
            "settings": None if settings is None else json.dumps(settings, sort_keys=True, default=str)}


# ----------------------------------------------------------------------------------------- RNG states
def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every RNG state as tensors, ints, floats and lists (what `weights_only` loading accepts)."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    version, py_state, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "python": {"version": int(version), "state": [int(x) for x in py_state], "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    state["batches"] = generator.get_state()  # last: a stacked member's checkpoint appends it to the others
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    npy = state["numpy"]
    np.random.set_state((npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"],
                         npy["cached_gaussian"]))
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    generator.set_state(state["batches"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------- save and load
_PLAIN = (str, int, float, bool, type(None), torch.dtype, torch.device)


def _plain(obj: Any, where: str = "checkpoint") -> Any:
    """`obj` with numpy scalars / arrays turned into Python numbers / tensors; anything that
    `torch.load(weights_only=True)` would refuse raises TypeError here, at save time."""
    if isinstance(obj, np.generic):  # before float: np.float64 is a float subclass but pickles as numpy
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if type(obj) in _PLAIN:
        return obj
    for base in (bool, int, float, str):  # subclasses (an IntEnum, a str subclass) pickle as their class
        if isinstance(obj, base):
            return base(obj)
    if isinstance(obj, dict):
        out = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where}: key {k!r} is a {type(k).__name__}; checkpoints take str / int keys")
            out[k] = _plain(v, f"{where}[{k!r}]")
        metadata = getattr(obj, "_metadata", None)  # a module state_dict's version info
        if metadata is not None:
            out._metadata = _plain(metadata, f"{where}._metadata")  # type: ignore[attr-defined]
        return out
    if isinstance(obj, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    raise TypeError(f"{where}: a {type(obj).__name__} cannot be stored in a checkpoint (tensors, numbers, "
                    "strings, lists, tuples and dicts only)")


def save(path: Path, payload: dict[str, Any]) -> None:
    """Serialise in memory (so the exact size is known), then write atomically and durably; a full disk
    raises `multitab.files.io.DiskFullError` ("no space left on <path> (needed ~N MB)")."""
    buffer = io.BytesIO()
    torch.save(_plain(payload), buffer)
    write_bytes(path, buffer.getbuffer())


def _diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {str(a)[:40]} -> {str(b)[:40]}")
    return out


BUDGET = "max_epochs"


def budget_only(payload: dict[str, Any], stored: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether a checkpoint of other settings may continue under the run's: its `stored` settings are the ones
    its fingerprint hashes, they differ from `current` (the run's, as JSON) in the epoch budget alone, and the
    checkpoint's epoch is within the new budget (so the run is where a run under the new budget would be)."""
    epoch, budget = payload.get("epoch"), current.get(BUDGET)
    return (fingerprint(stored) == payload.get("fingerprint") and stored != current
            and {**stored, BUDGET: budget} == current
            and isinstance(epoch, int) and isinstance(budget, int) and epoch <= budget)


def read(path: Path, expected_fingerprint: str, settings: dict[str, Any] | None = None
         ) -> tuple[dict[str, Any] | None, str]:
    """(payload, "") when the checkpoint at `path` exists, loads as plain data and belongs to this run's
    settings (or differs from them in the epoch budget alone, see `budget_only`); else (None, why not)."""
    if not path.exists():
        return None, "missing"
    try:
        payload = load_plain(path)  # a foreign, corrupt or unsafe file: never crash on it, never run it
    except CheckpointError as e:
        return None, e.why
    if not isinstance(payload, dict):
        return None, f"unreadable (a {type(payload).__name__}, not a checkpoint)"
    if payload.get("fingerprint") != expected_fingerprint:
        stored = payload.get("settings")
        if not isinstance(stored, str) or settings is None:
            return None, "of other settings or data"
        old, current = json.loads(stored), json.loads(json.dumps(settings, sort_keys=True, default=str))
        if budget_only(payload, old, current):
            log.info("%s: continuing under a new epoch budget (%s %s -> %s)", path, BUDGET, old.get(BUDGET),
                     current[BUDGET])
            return payload, ""
        changes = _diff(old, current) or ["the fingerprint's definition"]
        return None, "of other settings (" + "; ".join(changes) + ")"
    return payload, ""


def load(path: Path, expected_fingerprint: str, settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The checkpoint at `path` if it exists, is safe to read and belongs to this run's settings, else
    None (with a warning saying why, unless it is missing)."""
    payload, why = read(path, expected_fingerprint, settings)
    if payload is None and why != "missing":
        log.warning("%s: checkpoint %s; starting from scratch", path, why)
    return payload


def resume(checkpoint_dir: Path, expected_fingerprint: str, settings: dict[str, Any] | None = None
           ) -> dict[str, Any] | None:
    """The `last.pt` to continue from, or None to train from scratch. First removes temporaries a killed
    save left behind. A resumable `last.pt` also needs the best epoch's weights: when `best.pt` is missing,
    unreadable or of another epoch, it is rebuilt from `last.pt` if the last epoch was the best (same
    weights), otherwise the run starts over (the best weights are lost; retraining reproduces them)."""
    for p in remove_stale_temporaries(checkpoint_dir):
        log.info("%s: removed a temporary file left by an interrupted save", p)
    last_path, best_path = checkpoint_dir / LAST, checkpoint_dir / BEST
    last = load(last_path, expected_fingerprint, settings)
    if last is None:
        return None
    best_epoch = int(last["early_stopping"]["best_epoch"]) + 1  # 1-based; 0: no finite epoch yet
    if best_epoch == 0:
        return last
    best, why = read(best_path, expected_fingerprint, settings)
    if best is not None and int(best["epoch"]) == best_epoch:
        return last
    if best is not None:
        why = f"holds epoch {int(best['epoch'])}, but the best epoch in {LAST} is {best_epoch} (a save was cut short)"
    if int(last["epoch"]) == best_epoch and "val" in last:
        save(best_path, {**identity(expected_fingerprint, settings), "epoch": best_epoch, "model": last["model"],
                         "val": last["val"]})
        log.warning("%s: %s; rebuilt it from %s, whose weights are the best epoch's (%d)", best_path, why, LAST,
                    best_epoch)
        return last
    log.warning("%s: %s; the weights of the best epoch (%d) are lost and %s (epoch %d) cannot stand in for "
                "them: retraining from scratch", best_path, why, best_epoch, LAST, int(last["epoch"]))
    return None


def load_best(checkpoint_dir: Path, expected_fingerprint: str, settings: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The best epoch's checkpoint after training; RuntimeError saying why when there is none."""
    path = checkpoint_dir / BEST
    best, why = read(path, expected_fingerprint, settings)
    if best is not None:
        return best
    if why == "missing":
        raise RuntimeError(f"{path}: no best checkpoint (no epoch had a finite mean validation metric); check "
                           "the validation split's labels")
    raise RuntimeError(f"{path}: the best checkpoint is {why}; run the stage again (it is rebuilt or retrained)")
