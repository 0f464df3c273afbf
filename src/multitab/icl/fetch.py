"""Fetch every pretrained checkpoint params.yaml names (`icl.checkpoints.<name>`: hub repository, file, revision,
sha256) from the model hub into .cache/icl, verify each, and write icl.lock, which the `icl` stage reads.

    python -m multitab.icl.fetch [NAME ...] [--params params.yaml] [--lock icl.lock] [--cache .cache/icl]
    python -m multitab.icl.fetch NAME --from FILE    # a file downloaded elsewhere, copied in and verified

Each file is checked against the sha256 pinned in params.yaml, else the one an earlier fetch wrote in the
lock; a file with neither (a first fetch) is pinned in the lock by this fetch. A file that is not the pinned
one is refused (and removed from the cache), and an unreachable hub stops the command: one line on stderr
saying what to do, exit status 3. Files fetched before the failure stay locked."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

from multitab.config import ConfigError, load_params
from multitab.config.icl import IclCheckpoint
from multitab.files.io import atomic_path
from multitab.icl import lock
from multitab.icl.checkpoint import CheckpointError, HubUnreachable, fetch, verify
from multitab.runtime.exit_codes import BAD_INPUT


def _pin(name: str, wanted: IclCheckpoint, locked: lock.LockedCheckpoint | None) -> tuple[str | None, str, str | None]:
    """(sha256 to check against, what it is, revision to fetch) for checkpoint `name`."""
    same = locked is not None and lock.stale(name, wanted, locked) is None
    revision = wanted.revision or (locked.revision if same and locked else None)
    if wanted.sha256 is not None:
        return wanted.sha256, "params", revision
    if same and locked is not None:
        return locked.sha256, "lock", revision
    return None, "first fetch", revision


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.absolute().relative_to(root.absolute()))
    except ValueError:
        return str(path.absolute())


def fetch_one(name: str, wanted: IclCheckpoint, locked: lock.LockedCheckpoint | None, *, cache: Path, root: Path,
              source: Path | None) -> lock.LockedCheckpoint:
    """Checkpoint `name` fetched (or copied from `source`) and verified, as its lock entry."""
    sha256, against, revision = _pin(name, wanted, locked)
    if source is None:
        path, commit = fetch(wanted.hub_repo, wanted.hub_file, sha256=sha256, cache_dir=cache, revision=revision)
        found = verify(path, None)
        origin: str = "hub"
    else:
        found = verify(source, sha256)
        path, commit, origin = cache / "from-file" / wanted.hub_repo / wanted.hub_file, None, str(source)
        if not path.is_file() or verify(path, None) != found:
            with atomic_path(path) as tmp:
                shutil.copyfile(source, tmp)
    return lock.LockedCheckpoint(hub_repo=wanted.hub_repo, hub_file=wanted.hub_file, revision=commit, source=origin,
                                 path=_relative(path, root), sha256=found,
                                 checked_against=against)  # type: ignore[arg-type]


def _advice(name: str, wanted: IclCheckpoint, revision: str | None) -> str:
    url = f"https://huggingface.co/{wanted.hub_repo}/resolve/{revision or 'main'}/{wanted.hub_file}"
    return (f"download {url} on a machine that can reach it, copy it here and run "
            f"`python -m multitab.icl.fetch {name} --from <that file>`")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="keys of icl.checkpoints (default: all of them)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--lock", default="icl.lock", help="the lock file to write (the icl stage reads it)")
    p.add_argument("--cache", default=".cache/icl")
    p.add_argument("--from", dest="source", type=Path, default=None,
                   help="a checkpoint file obtained another way (one NAME): verified, copied into the cache, locked")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        checkpoints = load_params(args.params).icl.checkpoints
        entries = lock.read(args.lock)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    names = args.names or list(checkpoints)
    unknown = [n for n in names if n not in checkpoints]
    if unknown:
        print(f"error: unknown checkpoint(s) {', '.join(unknown)}; params.yaml icl.checkpoints has "
              f"{', '.join(checkpoints)}", file=sys.stderr)
        return BAD_INPUT
    if args.source is not None and len(names) != 1:
        print("error: --from takes exactly one NAME (the checkpoint the file is)", file=sys.stderr)
        return BAD_INPUT
    root = Path(args.lock).absolute().parent
    status = 0
    for name in names:
        wanted = checkpoints[name]
        try:
            entry = fetch_one(name, wanted, entries.get(name), cache=Path(args.cache), root=root, source=args.source)
        except HubUnreachable as e:
            print(f"error: {name}: {e}; {_advice(name, wanted, _pin(name, wanted, entries.get(name))[2])}",
                  file=sys.stderr)
            status = BAD_INPUT
            break
        except CheckpointError as e:
            hint = ("copy the right file in with `--from`" if args.source is None
                    else "this file is not the one params.yaml / icl.lock pin")
            print(f"error: {name}: {e}; {hint}", file=sys.stderr)
            status = BAD_INPUT
            break
        entries[name] = entry
        pinned = {"params": "pinned in params.yaml", "lock": "pinned in the lock",
                  "first fetch": "not pinned before: pinned in the lock now"}[entry.checked_against]
        print(f"{name}: {entry.path} sha256 {entry.sha256} ({pinned})")
    if entries:
        lock.write(args.lock, entries)
        print(f"wrote {args.lock}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
