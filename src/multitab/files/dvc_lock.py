"""dvc.lock and DVC's cache, read without DVC: the stages dvc.lock records (their dependency paths and
outputs with their md5s) and where DVC's cache keeps the object of an md5. multitab.files.integrity checks
the workspace against them; dvc.lock is read as plain YAML (multitab.files.yaml_data: safe and bounded).
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from multitab.files.io import write_json
from multitab.files.yaml_data import YAMLError, load_yaml

LOCK_FILE = "dvc.lock"
LOCK_INDEX = Path(".dvc") / "tmp" / "multitab-lock.json"
_MD5 = re.compile(r"[0-9a-f]{32}(\.dir)?")


def read_lock(root: Path, tries: int = 20) -> dict[str, Any] | None:
    """dvc.lock's stages with their dependency paths and outputs (params left out), None where there is no
    dvc.lock. DVC rewrites it in place while other stages run: a read that saw the file change, or a
    half-written file, is taken again. Parsing the YAML takes a large part of a second, so what a parse
    gave is kept in LOCK_INDEX under the md5 of the bytes it came from, and every stage after it reads that."""
    path = root / LOCK_FILE
    for _ in range(tries):
        try:
            before = path.stat()
            data = path.read_bytes()
            after = path.stat()
        except FileNotFoundError:
            return None
        if (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, len(data)):
            digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
            try:
                index = json.loads((root / LOCK_INDEX).read_text())
                if index.get("md5") == digest:
                    return index["lock"]  # type: ignore[no-any-return]
            except (OSError, ValueError, AttributeError, KeyError):
                pass
            try:
                lock = load_yaml(data)
            except YAMLError:
                lock = None
            if _complete(lock):
                reduced = {"stages": {
                    name: {"deps": [{"path": d["path"]} for d in (entry or {}).get("deps") or [] if "path" in d],
                           "outs": (entry or {}).get("outs") or []}
                    for name, entry in lock["stages"].items()}}
                with contextlib.suppress(OSError):  # a read-only .dvc/tmp: parsed again next time
                    write_json(root / LOCK_INDEX, {"md5": digest, "lock": reduced})
                return reduced
        time.sleep(0.2)
    raise ValueError(f"{path}: not a readable DVC lock file (is a `dvc` command rewriting it?); run again")


def _complete(lock: Any) -> bool:
    if not isinstance(lock, dict) or not isinstance(lock.get("stages"), dict):
        return False
    for entry in lock["stages"].values():
        for out in (entry or {}).get("outs") or []:
            if not isinstance(out, dict) or "path" not in out or not _MD5.fullmatch(str(out.get("md5", "0" * 32))):
                return False
    return True


def cache_dir(root: Path) -> Path:
    """DVC's cache folder: `cache.dir` of .dvc/config.local or .dvc/config (relative to .dvc/), else .dvc/cache."""
    for name in ("config.local", "config"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        try:
            parser.read(root / ".dvc" / name)
        except configparser.Error:
            continue
        if parser.has_option("cache", "dir"):
            return (root / ".dvc" / parser.get("cache", "dir")).resolve()
    return root / ".dvc" / "cache"


def cache_object(root: Path, md5: str) -> Path:
    """Where DVC's cache keeps the object named `md5` (a file's content, or a folder's `.dir` list)."""
    return cache_dir(root) / "files" / "md5" / md5[:2] / md5[2:]
