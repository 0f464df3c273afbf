"""Reading a checkpoint file of any kind (a training run's last.pt / best.pt, a pretrained in-context model's
released weights) without running code, and saying in one line why a file cannot be read.

Checkpoints are untrusted input (they travel between machines and come from model hubs): `torch.load`
runs with `weights_only=True`, which refuses anything but tensors and plain data before anything in the
file runs. PyTorch's message for a refused file advises loading it again with `weights_only=False`, which
would run whatever the file holds: that advice is never passed on."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from multitab.files.paths import file_problem


class CheckpointError(ValueError):
    """A checkpoint that is missing, is a directory, is not the pinned file, cannot be read as tensors and
    plain data, or does not hold what its reader expects; the message names the file, in one line. `why`:
    the reason alone (`why_unreadable`'s words, or what is wrong with the path)."""

    def __init__(self, message: str, why: str | None = None) -> None:
        super().__init__(message)
        self.why = why or message


def why_unreadable(e: BaseException) -> str:
    """Why `torch.load(weights_only=True)` failed, in a few words: refused (the file holds pickled code or
    objects) or unreadable (truncated or corrupt), without PyTorch's advice to load it unsafely."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and "weights_only" not in ln and not ln.strip().startswith("Check the documentation")]
    detail = text.partition("WeightsUnpickler error:")[2].strip()
    detail = detail.splitlines()[0].strip() if detail else (lines[0] if lines else "")
    detail = detail.split(". ")[0]  # PyTorch's zip reader goes on for three sentences about how it happened
    # the weights-only unpickler met something other than plain data (a global, a reduce call): refused.
    # "Unsupported operand" is a byte that is no pickle opcode at all: a corrupt file.
    if isinstance(e, pickle.UnpicklingError) and detail and not detail.startswith("Unsupported operand"):
        what = detail.split(" was not an allowed global")[0]
        return (f"refused: it holds pickled Python code or objects ({what}); loading it could run code, "
                "so it is never loaded")
    return f"unreadable (truncated or corrupt: {detail or type(e).__name__})"


def load_plain(path: str | Path) -> Any:
    """What the checkpoint file at `path` holds, read as tensors and plain data only (on the CPU); a
    CheckpointError naming the file and saying why when it is not a file or cannot be read so."""
    import torch

    problem = file_problem(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} {problem}", problem)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a foreign, corrupt or unsafe file: never crash on it, never run it
        why = why_unreadable(e)
        raise CheckpointError(f"checkpoint {path} is {why}", why) from e
