"""Checkpoints written atomically every epoch, so a killed run loses at most the epoch in progress.

`last.pt` holds everything needed to continue exactly: model and optimizer states, every RNG state (torch
CPU and CUDA, numpy, Python, and the generator that shuffles the batches), the number of finished
epochs, the early-stopping state, the per-epoch history and the time spent so far. `best.pt` holds the
weights of the best epoch (the ones tested). Both carry a fingerprint of the run's settings and data: a
checkpoint of other settings is never resumed (it is ignored, with a warning, and overwritten).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multitab.io import atomic_path

log = logging.getLogger(__name__)

LAST = "last.pt"
BEST = "best.pt"


def fingerprint(settings: dict[str, Any]) -> str:
    """A stable hash of JSON-serialisable run settings (data hashes, model, optimiser, seed ...)."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "batches": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    generator.set_state(state["batches"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: Path, payload: dict[str, Any]) -> None:
    """torch.save to a temporary file, then rename into place."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load(path: Path, expected_fingerprint: str) -> dict[str, Any] | None:
    """The checkpoint at `path` if it exists and belongs to this run's settings, else None."""
    if not path.is_file():
        return None
    try:
        payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a foreign or corrupt file: start over rather than crash on it
        log.warning("%s: unreadable checkpoint (%s); starting from scratch", path, e)
        return None
    if payload.get("fingerprint") != expected_fingerprint:
        log.warning("%s: checkpoint of other settings or data; starting from scratch", path)
        return None
    return payload
