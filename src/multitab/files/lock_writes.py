"""dvc.lock rewritten once for many stages, and the project's large YAML files parsed once.

Most of a train stage's time outside its command went to DVC's bookkeeping of a large project (dvc.lock:
500 kB; runs.yaml: 200 kB), measured by benchmarks/stage_overhead.py: `dvc repro --single-item STAGE` ends by
rewriting dvc.lock with a round-trip YAML parser (several seconds, holding the repository lock, so the other
stages wait), and it parses runs.yaml seven times and dvc.lock once. The flow (flows/stage_task.py)
therefore runs a stage's DVC as `python -m multitab.files.lock_writes DVC-ARGS`: `python -m
multitab.runtime.process DVC-ARGS` (DVC in this process, stopped with its commands) with two changes in that
process only:

- `defer_lock_writes`: the stage's dvc.lock entry, as DVC computes it (`dvc.stage.serialize.to_lockfile`),
  goes to PENDING_DIR (one JSON file per stage, written atomically while DVC holds the repository lock)
  instead of into dvc.lock. `merge` writes every pending entry into its dvc.lock in one rewrite, as DVC's
  `Lockfile.dump_stages` does, under the repository lock, and atomically (DVC writes it in place). The flow
  merges before a stage whose upstream stage has a pending entry starts (a stage checks its inputs against
  dvc.lock: multitab.files.integrity), every MERGE_EVERY_SECONDS and when it ends; `recover`, at the start
  of a run, merges what a killed run left whose outputs are still in the workspace as recorded (and drops
  the others: DVC decides again).
- multitab.files.parsed_once: runs.yaml and dvc.lock parsed once while their bytes stay the same, not once
  per read, also across the stages' processes (a JSON copy of the parse in .dvc/tmp).

The stages' outputs, run-cache entries and dvc.lock's final content are DVC's own; what changes is when
dvc.lock is written. MULTITAB_LOCK_WRITES=each in the flow's environment: plain DVC (every stage rewrites
dvc.lock itself), e.g. to compare (benchmarks/stage_overhead.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from multitab.files.integrity import IntegrityError, VerifiedState, check_out
from multitab.files.io import write_json, write_text
from multitab.files.parsed_once import install as install_parsed_once
from multitab.files.parsed_once import plain
from multitab.runtime.process import WARM_IMPORTS  # noqa: F401 - for the flow's warm processes that run this

PENDING_DIR = Path(".dvc") / "tmp" / "multitab-lock-pending"
MODE_ENV = "MULTITAB_LOCK_WRITES"
MERGE_EVERY_SECONDS = 120.0


def batched(environ: dict[str, str] | None = None) -> bool:
    """Whether the flow defers dvc.lock writes (MULTITAB_LOCK_WRITES unset or `batched`; `each`: plain DVC)."""
    mode = (os.environ if environ is None else environ).get(MODE_ENV, "batched")
    if mode not in ("batched", "each"):
        raise ValueError(f"{MODE_ENV}={mode!r}: expected `batched` (the default) or `each`")
    return mode == "batched"


def _entry_file(root: Path, stage: str) -> Path:
    return root / PENDING_DIR / f"{hashlib.sha256(stage.encode()).hexdigest()[:32]}.json"


def defer_lock_writes() -> None:
    """In this (DVC) process, DVC's dvc.lock writes go to PENDING_DIR instead (see the module docstring). An
    entry JSON cannot carry as it is (none seen: a non-text key, an infinite float) is written by DVC itself."""
    from dvc.dvcfile import Lockfile
    from dvc.stage import serialize

    dump_stages = Lockfile.dump_stages

    def pending_dump_stages(self: Any, stages: list[Any], **kwargs: Any) -> None:
        root = Path(self.repo.root_dir)
        for stage in stages:
            entry = serialize.to_lockfile(stage, **kwargs)[stage.name]
            if not plain(entry):
                dump_stages(self, [stage], **kwargs)
                continue
            write_json(_entry_file(root, stage.name), {
                "stage": stage.name,
                "lockfile": os.path.relpath(self.path, root),
                "written_ns": time.time_ns(),
                "entry": entry,
            })

    Lockfile.dump_stages = pending_dump_stages


def pending(root: str | Path) -> dict[str, dict[str, Any]]:
    """The pending entries of `root` by stage name, oldest first (a file being written is not listed)."""
    found = []
    for path in sorted((Path(root) / PENDING_DIR).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            found.append((int(record["written_ns"]), str(record["stage"]), record, path))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # gone meanwhile (merged by another run), or not ours
    return {stage: {**record, "file": path} for _, stage, record, path in sorted(found, key=lambda f: f[0])}


def pending_entry(root: str | Path, stage: str) -> dict[str, Any] | None:
    """`stage`'s pending dvc.lock entry (None when it has none)."""
    path = _entry_file(Path(root), stage)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record.get("entry") if isinstance(record, dict) and record.get("stage") == stage else None


def merge(root: str | Path, tries: int = 120) -> list[str]:
    """Write every pending entry of `root` into its dvc.lock (DVC's `modify_yaml`, as `Lockfile.dump_stages`),
    under DVC's repository lock (waiting while a stage's DVC holds it), then remove them. Returns the stages
    written."""
    root = Path(root)
    if not any((root / PENDING_DIR).glob("*.json")):
        return []
    from dvc.repo import Repo

    with Repo(str(root)) as repo, _repo_lock(repo, tries):
        records = pending(root)
        written = _merge_locked(root, records)
        if written and repo.scm_context.autostage:  # `git add dvc.lock`, as DVC does with core.autostage
            repo.scm_context.add(sorted({str(root / r["lockfile"]) for r in records.values()}))
        return written


def _merge_locked(root: Path, records: dict[str, dict[str, Any]]) -> list[str]:
    """DVC's `modify_yaml` of each dvc.lock (its round-trip parse and its dump), written atomically: a run
    stopped meanwhile leaves the old dvc.lock or the new one (DVC itself writes it in place). The entries'
    files go once their dvc.lock is written (a stop in between merges them again next time: the same)."""
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

    by_file: dict[str, list[dict[str, Any]]] = {}
    for record in records.values():
        by_file.setdefault(str(record["lockfile"]), []).append(record)
    for lockfile, entries in by_file.items():
        path = root / lockfile
        data = parse_yaml_for_update(path.read_text(encoding="utf-8"), str(path)) if path.exists() else {}
        if not data:
            data.update({"schema": "2.0"})
        data["stages"] = data.get("stages", {})
        for record in entries:
            data["stages"].update({record["stage"]: record["entry"]})
        write_text(path, dumps_yaml(data))
    for record in records.values():
        Path(record["file"]).unlink(missing_ok=True)
    return list(records)


@contextlib.contextmanager
def _repo_lock(repo: Any, tries: int) -> Iterator[None]:
    """DVC's repository lock, tried again after a pause while another DVC process holds it."""
    from dvc.lock import LockError

    for attempt in range(tries):
        try:
            repo.lock.lock()
            break
        except LockError:
            if attempt == tries - 1:
                raise
            time.sleep(min(0.2 * 2**attempt, 2.0))
    try:
        yield
    finally:
        repo.lock.unlock()


def recover(root: str | Path) -> tuple[list[str], list[str]]:
    """What a run that was killed left pending: merged into dvc.lock where the stage's outputs are in the
    workspace as its entry records them (or absent: DVC restores them), dropped where an output differs (DVC
    then finds the stage changed and decides). Returns (merged, dropped)."""
    root = Path(root)
    records = pending(root)
    if not records:
        return [], []
    state = VerifiedState(root)
    dropped = []
    for stage, record in records.items():
        try:
            for out in record["entry"].get("outs") or []:
                check_out(root, stage, out, state)
        except (IntegrityError, OSError, ValueError, KeyError, TypeError, AttributeError):
            dropped.append(stage)
            Path(record["file"]).unlink(missing_ok=True)
    state.save()
    merged = merge(root) if len(dropped) < len(records) else []
    return merged, dropped


if __name__ == "__main__":
    from multitab.runtime.process import run_dvc

    defer_lock_writes()
    install_parsed_once(Path.cwd())  # DVC runs in the project (the flow starts it there)
    sys.exit(run_dvc(sys.argv[1:]))
