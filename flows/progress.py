"""Finished training runs kept in git, so that a long study resumes on a machine whose DVC cache is gone
(`make layers` saves after each configuration and loads before the first; docs/study.md, "Both layers").

A finished `train@<run>` stage leaves a DVC run-cache entry (.dvc/cache/runs/...: the stage's command, the
hashes of everything it read, its parameters, and the md5s of its outputs) and its outputs in the cache
(metrics.json and the dvclive log: kilobytes). `save` copies the entries of the runs that match a pattern,
and the objects they name, from the cache into a folder of the repository (default results/study/progress/,
laid out as DVC's cache). `load` checks every object against its name and copies what the cache lacks back.
DVC itself then decides: a run whose code, data, parameters and command hash as they did when it trained is
restored from its run cache ("Restored" in the flow, and checked like any restored output, flows/integrity.py);
any other runs again. Nothing here marks a stage done. Runs still training when a session stops are not in
the run cache and start again (their checkpoints, 6-18 MB each, are not kept in git).

index.json names, per run, the entry's file, the commit HEAD was at and the CPU when it was saved: the
record of a study that spans sessions states which runs were trained where (results/study/README.md).

Nothing unreadable is used: an index.json that is cut short or not an index, or missing beside saved entries,
stops `save` and `load`; `load` checks every run entry against the hashes DVC names it by (its folder and its file)
and every object against its name, and that each object an entry names is there, before it copies anything. Each
refusal names the file and what to do (exit status 3).
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from dvc.utils import dict_sha256
from dvc.utils.serialize import YAMLFileCorruptedError, parse_yaml
from dvc_data.hashfile.meta import Meta

from multitab.files.dvc_lock import cache_dir
from multitab.files.integrity import md5_file
from multitab.files.io import atomic_path, write_json
from multitab.runtime.exit_codes import BAD_INPUT
from multitab.runtime.provenance import cpu_model

DEFAULT_DIR = "results/study/progress"
DEFAULT_RUNS = "attribution-*"
_TRAIN = re.compile(r"python -m stages\.train --run (\S+)")
_MD5 = re.compile(r"[0-9a-f]{32}(\.dir)?")


class ProgressError(ValueError):
    """A saved run or object is unusable; the message names the file and what to do."""


def _entries(cache: Path, pattern: str) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Run-cache entries (file, parsed) of `train@<run>` stages whose run matches `pattern`, by run."""
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in sorted((cache / "runs").glob("*/*/*")):
        try:
            entry = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue  # not ours to judge: DVC ignores what it cannot read
        hit = _TRAIN.fullmatch(" ".join(str((entry or {}).get("cmd", "")).split())) if isinstance(entry, dict) else None
        if hit and fnmatch.fnmatchcase(hit.group(1), pattern):
            found[hit.group(1)] = (path, entry)
    return found


def _objects(bases: list[Path], entry: dict[str, Any], where: Path) -> list[str]:
    """The md5 names of an entry's outputs, a folder's `.dir` list (from the first of `bases` that holds it)
    followed by its files."""
    names: list[str] = []
    for out in entry.get("outs") or []:
        md5 = str((out or {}).get("md5", ""))
        if not _MD5.fullmatch(md5):
            raise ProgressError(f"{where}: output {out!r} has no md5; delete this entry and run the stage again")
        names.append(md5)
        if md5.endswith(".dir"):
            listing = next((_object(b, md5) for b in bases if _object(b, md5).is_file()), _object(bases[0], md5))
            try:
                names += [str(item["md5"]) for item in json.loads(listing.read_bytes())]
            except (ValueError, TypeError, KeyError) as e:
                raise ProgressError(f"{listing}: not a folder listing of DVC's ({type(e).__name__}: {e}); delete it "
                                    f"and run {where.name}'s stage again") from None
    return names


def _entry_names(entry: dict[str, Any]) -> tuple[str, str]:
    """The names DVC gives a run-cache entry, its folder's and its file's (dvc.stage.cache: the sha256 of the entry
    with its outputs' paths only, and of the whole entry; sizes and file counts left out)."""
    exclude = [Meta.PARAM_SIZE, Meta.PARAM_NFILES]
    key = dict_sha256({**entry, "outs": [out["path"] for out in entry.get("outs") or []]}, exclude=exclude)
    return key, dict_sha256(entry, exclude=exclude)


def _restore_hint(path: Path, root: Path) -> str:
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    return f"restore it from git (`git checkout -- {shown}`)"


def _check_entry(path: Path, root: Path) -> dict[str, Any]:
    """A saved run entry, parsed as DVC parses it and checked against the names DVC gave it."""
    try:
        entry = parse_yaml(path.read_text(encoding="utf-8"), str(path))
        key, value = _entry_names(entry)
    except (YAMLFileCorruptedError, UnicodeDecodeError, TypeError, KeyError, AttributeError):
        key, value = "", ""
    if (path.parent.name, path.name) != (key, value):
        raise ProgressError(f"{path}: the run entry does not hash to its name (corrupted, or not an entry of DVC's "
                            f"run cache); {_restore_hint(path, root)}, or delete it and its run's line in index.json "
                            "(the run then trains again)")
    return dict(entry)


def _read_index(folder: Path, root: Path) -> dict[str, dict[str, Any]]:
    """index.json of the saved runs ({} for a folder that holds none yet); ProgressError when it is cut short or
    not an index, or missing beside saved entries."""
    path = folder / "index.json"
    if not path.is_file():
        saved = sorted((folder / "runs").glob("*/*/*"))
        if saved:
            raise ProgressError(f"{path}: missing, while {folder / 'runs'} holds {len(saved)} saved run entries; "
                                f"{_restore_hint(path, root)}")
        return {}
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ProgressError(f"{path}: not readable JSON ({e}: cut short?); {_restore_hint(path, root)}") from None
    if not isinstance(index, dict) or not all(isinstance(v, dict) and isinstance(v.get("entry"), str)
                                              for v in index.values()):
        raise ProgressError(f"{path}: not an index of saved runs (run -> {{entry, commit, cpu, saved}}); "
                            f"{_restore_hint(path, root)}")
    return index


def _object(base: Path, md5: str) -> Path:
    return base / "files" / "md5" / md5[:2] / md5[2:]


def _copy(src: Path, dest: Path) -> bool:
    """Copy a file whole (multitab.files.io.atomic_path) unless `dest` exists; whether it copied."""
    if dest.exists():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)
    return True


def _head(root: Path) -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)  # noqa: S607
    return r.stdout.strip() if r.returncode == 0 else "unknown"


def save(root: str | Path, folder: str | Path = DEFAULT_DIR, pattern: str = DEFAULT_RUNS) -> list[str]:
    """Copy the finished runs matching `pattern` (their run-cache entries and output objects) from the DVC
    cache of `root` into `folder`; the runs newly saved."""
    root = Path(root)
    cache, dest = cache_dir(root), root / folder
    index_path = dest / "index.json"
    index = _read_index(dest, root)
    new = []
    for run, (path, entry) in _entries(cache, pattern).items():
        rel = path.relative_to(cache)
        try:
            objects = _objects([cache], entry, path)
            missing = [m for m in objects if not _object(cache, m).is_file()]
        except FileNotFoundError as e:
            missing = [str(e.filename)]
        if missing:  # DVC's cache no longer holds its outputs (`dvc gc`): DVC would run it again too
            print(f"not saved: {run} (DVC's cache lacks {missing[0]})", file=sys.stderr)
            continue
        bad = [str(_object(cache, m)) for m in objects if not _object(dest, m).is_file()
               and md5_file(_object(cache, m)) != m.removesuffix(".dir")]
        try:
            _check_entry(path, root)
        except ProgressError:
            bad.append(str(path))
        if bad:  # kept out of the store (load would refuse it); DVC's integrity checks name it where it is used
            print(f"not saved: {run} (DVC's cache holds {bad[0]} corrupted: its content does not hash to its name)",
                  file=sys.stderr)
            continue
        for md5 in objects:
            _copy(_object(cache, md5), _object(dest, md5))
        _copy(path, dest / rel)
        if index.get(run, {}).get("entry") != rel.as_posix():
            index[run] = {"entry": rel.as_posix(), "commit": _head(root), "cpu": cpu_model() or platform.machine(),
                          "saved": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            new.append(run)
    if new:
        write_json(index_path, dict(sorted(index.items())))
    return new


def load(root: str | Path, folder: str | Path = DEFAULT_DIR) -> int:
    """Check the saved runs (index.json readable, each run it names saved, every entry against its names, every
    object against its name and there), then copy what the DVC cache of `root` lacks; the number of files copied.
    Anything unusable stops it before anything is copied."""
    root = Path(root)
    src, cache = root / folder, cache_dir(root)
    if not (src / "runs").is_dir():
        return 0
    for run, item in _read_index(src, root).items():
        if not (src / item["entry"]).is_file():
            raise ProgressError(f"{src / 'index.json'}: run {run}'s entry {item['entry']} is not in {src}; "
                                f"{_restore_hint(src / item['entry'], root)}, or delete the run's line")
    for obj in sorted((src / "files" / "md5").glob("*/*")):
        name = obj.parent.name + obj.name
        if md5_file(obj) != name.removesuffix(".dir"):
            raise ProgressError(f"{obj}: its md5 is not its name (corrupted); restore it from git "
                                f"(`git checkout -- {obj.relative_to(root)}`) or delete it and its run's entry")
    entries = sorted((src / "runs").glob("*/*/*"))
    for path in entries:
        entry = _check_entry(path, root)
        try:
            missing = [m for m in _objects([src, cache], entry, path) if not _object(src, m).is_file()
                       and not _object(cache, m).is_file()]
        except FileNotFoundError as e:
            missing = [Path(str(e.filename)).parent.name + Path(str(e.filename)).name]
        if missing:
            raise ProgressError(f"{path}: names output object {missing[0]}, which is neither in {src / 'files'} nor "
                                f"in DVC's cache; {_restore_hint(_object(src, missing[0]), root)}, or delete the "
                                "entry and its run's line in index.json (the run then trains again)")
    copied = 0
    for obj in sorted((src / "files" / "md5").glob("*/*")):
        copied += _copy(obj, cache / obj.relative_to(src))
    for path in entries:
        copied += _copy(path, cache / path.relative_to(src))
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.progress", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["save", "load"])
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"the folder in the repository (default {DEFAULT_DIR})")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"save: which runs (a glob, default {DEFAULT_RUNS!r})")
    args = parser.parse_args(argv)
    try:
        if args.action == "save":
            new = save(".", args.dir, args.runs)
            print(f"saved {len(new)} finished run(s) to {args.dir}" + (f": {', '.join(new)}" if new else ""))
        else:
            print(f"copied {load('.', args.dir)} file(s) from {args.dir} into DVC's cache")
    except ProgressError as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
