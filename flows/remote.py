"""Results that travel between machines through the project's DVC remote (params.yaml
`orchestration.sync_remote: true`): DVC's default remote, `dvc remote add -d NAME URL` in .dvc/config (a
machine's own credentials go in .dvc/config.local, which git ignores). No host is named here.

- Before the flow decides what is stale it pulls, `dvc pull --run-cache --allow-missing`: the run-cache
  entries of every stage that completed on any machine (and the outputs this checkout's dvc.lock names).
  A stale stage whose entry is there is then restored by `dvc repro --pull` (DVC fetches that entry's
  outputs and writes dvc.lock), not run again.
- After a stage completes, the machine that ran it pushes, `dvc push --run-cache <stage>`: its outputs and
  its run-cache entry.
- Checkpoints: DVC pushes nothing of a stage that did not complete, so the folder a stage names in dvc.yaml
  as `meta: {checkpoints: PATH}` is copied to the remote (`partial/<stage>/` beside DVC's own folders)
  whenever a file in it changes while the stage runs, and copied back before the stage starts on a machine
  that has none of it: a stage whose machine died resumes elsewhere from the last copy. The copy is removed
  once the stage's results are pushed.

DVC's run cache is kept only for stages without `persist: true` outputs (dvc/stage/cache.py, `_can_hash`):
a stage with one is never restored from it and runs again where its dvc.lock entry is missing. The
project's `train` and `train_stack` stages have none (their checkpoints are named in `meta`, not `outs`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PARTIAL = "partial"


class RemoteError(RuntimeError):
    """A `dvc pull` / `dvc push` failed; the message holds DVC's last lines."""


def _dvc(root: str | Path, args: list[str], env: dict[str, str] | None = None) -> str:
    """`dvc --wait-for-lock ARGS` in `root` with this interpreter; RemoteError with DVC's output on failure."""
    cmd = [sys.executable, "-m", "dvc", "--wait-for-lock", *args]
    r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)  # noqa: S603
    if r.returncode != 0:
        tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-3:])
        raise RemoteError(f"dvc {' '.join(args)} failed in {root} (exit {r.returncode}): {tail}")
    return r.stdout


def pull(root: str | Path, env: dict[str, str] | None = None) -> str:
    """Every run-cache entry of the remote and the outputs dvc.lock names (missing ones are no error)."""
    return _dvc(root, ["pull", "--run-cache", "--allow-missing"], env)


def push(root: str | Path, stage: str, env: dict[str, str] | None = None) -> str:
    """The completed `stage`'s outputs and the run-cache entries of this checkout."""
    return _dvc(root, ["push", "--run-cache", stage], env)


def remote_fs(root: str | Path) -> tuple[Any, str]:
    """(filesystem, path) of the project's default DVC remote."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            remote = repo.cloud.get_remote(command="checkpoint copy")
            return remote.fs, remote.path
    except DvcException as e:  # no default remote, a malformed .dvc/config
        raise RemoteError(f"{root}: {e} (orchestration.sync_remote needs `dvc remote add -d NAME URL`)") from e


def partial_path(fs: Any, base: str, stage: str) -> str:
    return str(fs.join(base, PARTIAL, stage.replace("/", "_")))


def restore_checkpoints(root: str | Path, stage: str, folder: str) -> int:
    """Copy `stage`'s checkpoint copy from the remote into `folder` (relative to `root`) when that folder is
    empty or missing here; returns the number of files copied."""
    local = Path(root) / folder
    if local.is_dir() and any(p.is_file() for p in local.rglob("*")):
        return 0  # this machine's own checkpoints are at least as new
    fs, base = remote_fs(root)
    src = partial_path(fs, base, stage)
    if not fs.exists(src):
        return 0
    n = 0
    for path in fs.find(src):
        rel = os.path.relpath(path, src)
        if rel.endswith(".part"):
            continue
        dest = local / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        fs.get_file(path, str(tmp))
        os.replace(tmp, dest)
        n += 1
    return n


def copy_changed(fs: Any, dest: str, local: Path, seen: dict[Path, tuple[int, int]]) -> int:
    """Upload the files of `local` that changed since `seen` (size, mtime); each written whole (a temporary
    name, then a rename), so a reader never sees half a checkpoint."""
    n = 0
    if not local.is_dir():
        return 0
    for path in sorted(p for p in local.rglob("*") if p.is_file() and not p.name.startswith(".")):
        try:
            st = path.stat()
        except FileNotFoundError:  # replaced between the listing and here: the next round sees it
            continue
        key = (st.st_size, st.st_mtime_ns)
        if seen.get(path) == key:
            continue
        target = str(fs.join(dest, *path.relative_to(local).parts))
        fs.makedirs(str(fs.parent(target)), exist_ok=True)
        fs.put_file(str(path), target + ".part")
        fs.mv(target + ".part", target)
        seen[path] = key
        n += 1
    return n


@contextmanager
def mirrored_checkpoints(root: str | Path, stage: str, folder: str, every: float = 2.0) -> Iterator[None]:
    """While the body runs, copy what changes in `folder` (relative to `root`) to the remote every `every`
    seconds, from a thread; a last copy when the body ends."""
    fs, base = remote_fs(root)
    dest = partial_path(fs, base, stage)
    local = Path(root) / folder
    seen: dict[Path, tuple[int, int]] = {}
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            copy_changed(fs, dest, local, seen)

    thread = threading.Thread(target=loop, name=f"checkpoints-{stage}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        copy_changed(fs, dest, local, seen)


def drop_checkpoints(root: str | Path, stage: str) -> None:
    """Remove `stage`'s checkpoint copy from the remote (its results are pushed)."""
    fs, base = remote_fs(root)
    path = partial_path(fs, base, stage)
    if fs.exists(path):
        fs.rm(path, recursive=True)
