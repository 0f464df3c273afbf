"""The files a stage reads are the files their producer recorded: outputs checked against dvc.lock.

DVC trusts the name of an object in its cache. `dvc checkout` and a restore from its run cache copy the
object into the workspace and record dvc.lock's hash for the new file in DVC's state database without
hashing it; DVC hashes an object again only when its size, mtime or inode changed. An object corrupted with
its stat unchanged (a bit gone bad on disk, a copy that keeps file times) thus becomes a workspace file that
`dvc status` calls up to date, the stages after it read it, and a metric comes out wrong without a word.
Here the files are hashed (md5, as DVC 3 records them) and compared with dvc.lock: a file output's `md5`, or
each file's md5 in a folder output's `.dir` object in DVC's cache, itself checked against its name.

- `verify_stage_inputs`: every stage script (stages/_common.py) checks the outputs of other stages that
  its dependencies name, when DVC runs it (DVC names the stage in DVC_STAGE). Sources, params and local
  files no stage produces are not checked; without dvc.lock there is nothing to check.
- `verify_outputs`: flows.pipeline's pre-flight (the outputs of every stage DVC finds up to date, before
  anything runs) and its check of a stage DVC restored from its run cache (before any stage after it).

A difference stops with `IntegrityError` (a ValueError: exit status BAD_INPUT), one line naming the file
and what to do: `dvc checkout --relink --force <file>` when DVC's cache object is intact; when the object itself
is corrupted, removing it and re-running the producer (DVC never rewrites an object that exists).

Only what changed is hashed again: a file whose (size, mtime_ns, ctime_ns, inode) match its entry in
`.dvc/tmp/multitab-verified.json` (written atomically) has the md5 recorded there. A checkout writes a new
file (new inode and times), and no program can set a file's ctime back, so an edit is hashed again even
when its mtime was restored. dvc.lock and DVC's cache are read as dvc_lock.py reads them (plain YAML,
multitab.files.yaml_data); nothing here imports DVC.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multitab.files.dvc_lock import LOCK_FILE, cache_object, read_lock
from multitab.files.io import write_json
from multitab.files.stage_deps import declared_deps, locked_deps, normalise
from multitab.files.yaml_data import YAMLError
from multitab.runtime.exit_codes import BAD_INPUT

STATE_FILE = Path(".dvc") / "tmp" / "multitab-verified.json"
_CHUNK = 1 << 22


class IntegrityError(ValueError):
    """A file differs from what its producer recorded in dvc.lock; the message is one line, naming the file
    and what to do."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def md5_file(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Tally:
    """What a check looked at: files compared, of which hashed (not known from the verified state)."""

    files: int = 0
    hashed: int = 0
    hashed_bytes: int = 0


class VerifiedState:
    """md5s of workspace files keyed by their stat, so that an unchanged file is not hashed again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / STATE_FILE
        self.entries: dict[str, list[int | str]] = self._read()
        self.new: dict[str, list[int | str]] = {}
        self.tally = Tally()

    def _read(self) -> dict[str, list[int | str]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):  # none yet, or unreadable: everything is hashed again
            return {}
        files = data.get("files") if isinstance(data, dict) else None
        return files if isinstance(files, dict) else {}

    def md5(self, rel: str) -> str:
        st = (self.root / rel).stat()
        key: list[int | str] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        self.tally.files += 1
        known = self.entries.get(rel)
        if known is not None and known[:4] == key:
            return str(known[4])
        digest = md5_file(self.root / rel)
        self.tally.hashed += 1
        self.tally.hashed_bytes += st.st_size
        self.entries[rel] = self.new[rel] = [*key, digest]
        return digest

    def save(self) -> None:
        """Lay this check's new entries over the file as it is now (a stage running beside this one may have
        written it meanwhile; losing an entry costs only a hash), dropping entries of files gone."""
        if not self.new:
            return
        entries = {**self._read(), **self.new}
        entries = {p: e for p, e in entries.items() if (self.root / p).exists()}
        with contextlib.suppress(OSError):  # a read-only .dvc/tmp: the next check hashes again
            write_json(self.path, {"version": 1, "files": entries})


def _shown(root: Path, path: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _rerun(stage: str) -> str:
    return f"`dvc repro --force --single-item {stage}`"


def _differs(root: Path, stage: str, rel: str, md5: str, found: str) -> IntegrityError:
    head = f"{rel}: differs from what {stage} recorded in dvc.lock (md5 {md5}, the file's {found})"
    obj = cache_object(root, md5)
    if not obj.is_file():
        return IntegrityError(rel, f"{head}; DVC's cache holds no copy of it: re-run the stage: {_rerun(stage)}")
    shown = _shown(root, obj)
    if md5_file(obj) == md5:
        return IntegrityError(rel, f"{head}; DVC's cache holds it intact: restore it with `dvc checkout --relink "
                                   f"--force {rel}` (an edit you meant to keep: `dvc commit {stage}`)")
    return IntegrityError(rel, f"{head}, and so does DVC's cache object {shown}: remove it (`rm -f {shown}`) and "
                               f"re-run the stage: {_rerun(stage)}")


def _manifest(root: Path, stage: str, out: str, md5: str) -> list[dict[str, Any]] | None:
    """The `.dir` object listing a folder output's files, checked against its name; None if not cached."""
    obj = cache_object(root, md5)
    try:
        data = obj.read_bytes()
    except FileNotFoundError:
        return None
    if hashlib.md5(data, usedforsecurity=False).hexdigest() != md5.removesuffix(".dir"):
        shown = _shown(root, obj)
        raise IntegrityError(out, f"{shown}: DVC's list of the files of {out} ({stage}'s output in dvc.lock) is "
                                  f"corrupted (its md5 is not its name): remove it (`rm -f {shown}`) and re-run "
                                  f"the stage: {_rerun(stage)}")
    entries = json.loads(data)
    return [e for e in entries if isinstance(e, dict) and "md5" in e and "relpath" in e]


def _tree_md5(root: Path, out: str, state: VerifiedState) -> str:
    """A folder's md5 as DVC computes it: of the sorted list of its files' md5s and paths."""
    listing = sorted(p.relative_to(root / out).as_posix() for p in (root / out).rglob("*") if p.is_file())
    tree = [{"md5": state.md5(f"{out}/{rel}"), "relpath": rel} for rel in listing]
    return hashlib.md5(json.dumps(tree, sort_keys=True).encode(), usedforsecurity=False).hexdigest() + ".dir"


def check_out(root: Path, stage: str, entry: Mapping[str, Any], state: VerifiedState, within: str = "") -> None:
    """One output of dvc.lock (`entry`, of `stage`) against the workspace; only the part under `within` (a
    path inside a folder output). An output that is not there, or recorded by DVC 2 (md5-dos2unix), is
    skipped: DVC itself restores or re-runs it."""
    out, md5 = normalise(str(entry["path"])), str(entry.get("md5") or "")
    if entry.get("hash") != "md5" or not md5 or not (root / out).exists():
        return
    if not md5.endswith(".dir"):
        found = state.md5(out)
        if found != md5:
            raise _differs(root, stage, out, md5, found)
        return
    listed = _manifest(root, stage, out, md5)
    if listed is None:  # a folder with `cache: false`, or DVC's cache gone: the folder as a whole
        found = _tree_md5(root, out, state)
        if found != md5:
            raise IntegrityError(out, f"{out}: differs from what {stage} recorded in dvc.lock (md5 {md5}, the "
                                      f"folder's {found}); DVC's cache holds no list of its files: re-run the "
                                      f"stage: {_rerun(stage)}")
        return
    for item in listed:
        relpath = str(item["relpath"])
        if within and relpath != within and not relpath.startswith(within + "/"):
            continue
        rel = f"{out}/{relpath}"
        if not (root / rel).exists():
            raise IntegrityError(rel, f"{rel}: missing from {out} ({stage}'s output in dvc.lock): restore it with "
                                      f"`dvc checkout {out}`")
        found = state.md5(rel)
        if found != item["md5"]:
            raise _differs(root, stage, rel, str(item["md5"]), found)


def _confirmed(root: Path, check: Callable[[dict[str, Any], VerifiedState], None]) -> Tally:
    """Run `check` on dvc.lock; a difference counts only if dvc.lock was not rewritten meanwhile (a stage
    completing beside this one), else it is checked again on the new dvc.lock."""
    lock = read_lock(root)
    if lock is None:
        return Tally()
    state = VerifiedState(root)
    try:
        check(lock, state)
    except IntegrityError:
        time.sleep(0.5)
        again = read_lock(root)
        if again is None or again == lock:
            raise
        check(again, state)
    finally:
        state.save()
    return state.tally


def verify_outputs(root: str | Path, stages: Iterable[str] | None = None) -> Tally:
    """Every output dvc.lock records for `stages` (default: every stage) that is in the workspace."""
    root = Path(root)
    wanted = None if stages is None else set(stages)

    def check(lock: dict[str, Any], state: VerifiedState) -> None:
        for stage, entry in (lock.get("stages") or {}).items():
            if wanted is None or stage in wanted:
                for out in (entry or {}).get("outs") or []:
                    check_out(root, stage, out, state)

    return _confirmed(root, check)


def verify_stage_inputs(environ: Mapping[str, str] = os.environ) -> Tally:
    """The outputs of other stages that the running DVC stage (DVC_STAGE, in the project DVC_ROOT) depends
    on, as dvc.yaml declares them now and as dvc.lock recorded them when it last ran. Outside DVC: nothing."""
    stage, root_dir = environ.get("DVC_STAGE"), environ.get("DVC_ROOT")
    if not stage or not root_dir:
        return Tally()
    stage = stage.removeprefix("dvc.yaml:")
    if ":" in stage:  # a stage of another dvc.yaml, with its own dvc.lock: not checked here
        return Tally()
    root = Path(root_dir)
    if not (root / LOCK_FILE).is_file():
        return Tally()
    try:
        declared = declared_deps(root, stage)
    except (OSError, YAMLError, LookupError, TypeError, ValueError, AttributeError):
        declared = []  # what this reader cannot follow (DVC could): dvc.lock's record still counts

    def check(lock: dict[str, Any], state: VerifiedState) -> None:
        deps = set(declared) | set(locked_deps(lock, stage))
        for producer, entry in (lock.get("stages") or {}).items():
            if producer == stage:
                continue
            for out in (entry or {}).get("outs") or []:
                path = normalise(str(out.get("path", "")))
                for dep in deps:
                    if dep == path or path.startswith(dep + "/"):
                        check_out(root, producer, out, state)
                        break
                    if dep.startswith(path + "/"):
                        check_out(root, producer, out, state, within=dep[len(path) + 1:])

    return _confirmed(root, check)


def main(argv: list[str] | None = None) -> int:
    """`python -m multitab.files.integrity [ROOT]`: every output dvc.lock records, checked; a summary line."""
    p = argparse.ArgumentParser(description="check the workspace's DVC outputs against dvc.lock")
    p.add_argument("root", nargs="?", default=".", help="the DVC project (default: the current folder)")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        tally = verify_outputs(a.root)
    except ValueError as e:
        print(f"multitab.files.integrity: {e}", file=sys.stderr)
        return BAD_INPUT
    print(f"multitab.files.integrity: {tally.files} files match dvc.lock ({tally.hashed} hashed, "
          f"{tally.hashed_bytes / 1e6:.1f} MB) in {time.monotonic() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
