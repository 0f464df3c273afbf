"""The flow's checks that no corrupted DVC output is used (multitab.files.integrity): a pre-flight before any
stage runs, and a check of each stage DVC restores from its run cache before any stage after it starts.

The pre-flight hashes the outputs of the stages DVC finds up to date: DVC vouches for those from its state
database, which records dvc.lock's hash for a file it checked out of its cache without hashing it, so a
corrupted cache object (or a file edited with its size and mtime put back) passes as up to date and the
flow would skip every stage after it. The outputs of the stages DVC finds changed are left to DVC: it has
seen them change (an edit, a stage stopped before DVC recorded it, a dvc.lock from another commit) and
runs or restores the stage, and what it restores is checked here after the stage. An output that a later
stage reads is also checked by that stage itself (stages/_common.py). Only files changed since their last
check are hashed (the verified state, .dvc/tmp/multitab-verified.json), so a second run costs stat calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.dag import StagePlan
from multitab.files.integrity import Tally, VerifiedState, check_out, read_lock, verify_outputs
from multitab.files.io import remove_stale_temporaries


def preflight(root: str | Path, plan: StagePlan) -> Tally:
    """The outputs dvc.lock records for the plan's stages that DVC found up to date (all of them when it was
    not asked); raises multitab.files.integrity.IntegrityError (a ValueError) naming the first file that differs."""
    changed = plan.changed or frozenset()
    return verify_outputs(root, [s for s in plan.order if s not in changed])


def check_restored(root: str | Path, stage: str, entry: Mapping[str, Any] | None = None) -> Tally:
    """The outputs of `stage` that DVC has just restored from its run cache (copied from cache objects it
    does not hash), as dvc.lock records them, or as `entry` does (its dvc.lock entry while it waits for the
    flow's next merge: multitab.files.lock_writes); raises IntegrityError as `preflight`."""
    if entry is None:
        return verify_outputs(root, [stage])
    state = VerifiedState(Path(root))
    try:
        for out in entry.get("outs") or []:
            check_out(Path(root), stage, out, state)
    finally:
        state.save()
    return state.tally


def sweep_restored(root: str | Path, stage: str, before: float, entry: dict[str, Any] | None = None) -> list[Path]:
    """Remove the temporaries beside the outputs of `stage` (as dvc.lock records them, or as `entry`, its waiting
    entry, does: multitab.files.lock_writes) that multitab.files.io leaves (a killed run's temporary output, with the
    scratch inside it), those last modified before `before` (when the attempt that restored it started: what a run
    of the stage started since, from another flow, is left alone). Returns what it removed."""
    root = Path(root)
    if entry is None:
        entry = ((read_lock(root) or {}).get("stages") or {}).get(stage) or {}
    removed: list[Path] = []
    for out in entry.get("outs") or []:
        path = root / str(out["path"])
        removed += remove_stale_temporaries(path.parent, path.name, before=before)
    return removed
