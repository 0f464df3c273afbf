"""The project's large YAML files parsed once, not once per read, in the DVC process of a stage the flow runs.

`dvc repro --single-item STAGE` of a train stage parses runs.yaml (200 kB) seven times (dvc.yaml's `vars`, then
each time it hashes the stage's params dependency) and dvc.lock (500 kB, with a schema check) once; at a
few hundred milliseconds each, that was most of the stage's time outside its command after dvc.lock's
rewrite (benchmarks/stage_overhead.py). `install` (called by `python -m multitab.files.lock_writes`, in that
process only) makes DVC's reads of a file inside the project go through `Parsed`: the parse of the file's
bytes, keyed by their md5, kept in this process and in CACHE_DIR as JSON (so that the next stage's process
reads it back in milliseconds while the file stays the same: runs.yaml for a whole run, dvc.lock until the
flow's next merge). A params dependency's values are looked up once per file content and keys (DVC walks the
whole file for each key, each time it hashes the dependency). A file JSON cannot carry as YAML gave it (a
date, a key that is not text) is parsed each time, as before; each reader gets its own copy. What DVC then
does with the data is unchanged (the stage's run-cache key included).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multitab.files.io import write_text

CACHE_DIR = Path(".dvc") / "tmp" / "multitab-parsed"


def plain(value: Any) -> bool:
    """Whether `value` comes back from JSON as it is: text, finite numbers, booleans, null, lists and maps
    with text keys (what DVC's YAML files hold)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return False


class Parsed:
    """Parses of the files of the project `root`, by the md5 of their bytes, in this process and on disk."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        # by md5: the parse as JSON text (a reader's copy is one json.loads, faster than copy.deepcopy), or
        # the parse itself where JSON cannot carry it
        self.memory: dict[str, tuple[str | None, Any]] = {}

    def _cache_file(self, path: Path, digest: str) -> Path:
        name = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        return self.root / CACHE_DIR / f"{name}-{digest}.json"

    def get(self, path: str | Path, raw: bytes, parse: Callable[[], Any]) -> Any:
        """`parse()` of the file `path` whose bytes are `raw`, or what an earlier parse of the same bytes gave
        (None, kept nowhere, when `parse` returns None)."""
        path = Path(path).resolve()
        digest = hashlib.md5(raw, usedforsecurity=False).hexdigest()
        if digest not in self.memory:
            cache = self._cache_file(path, digest)
            text: str | None
            try:
                text = cache.read_text()
                data = json.loads(text)
            except (OSError, ValueError):
                data = parse()
                if data is None:  # nothing to keep (the parse says the bytes changed meanwhile)
                    return None
                text = json.dumps(data) if plain(data) else None
                if text is not None:
                    self._store(cache, text)
            self.memory[digest] = (text, data)
        text, data = self.memory[digest]
        return json.loads(text) if text is not None else copy.deepcopy(data)

    def _store(self, cache: Path, text: str) -> None:
        try:
            write_text(cache, text)
            for old in cache.parent.glob(f"{cache.name.split('-', 1)[0]}-*.json"):  # earlier contents
                if old != cache:
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only .dvc/tmp: parsed again next time
            pass

    def inside(self, path: str | Path) -> bool:
        return Path(path).resolve().is_relative_to(self.root)


def install(root: str | Path) -> Parsed:
    """Route this process's DVC reads of parameters files (dvc.yaml's `vars`, params dependencies) and of
    dvc.lock inside `root` through one `Parsed`, and keep a params dependency's values while the file's bytes
    stay the same."""
    import dvc.dependency.param as param
    import dvc.utils.serialize as serialize
    from dvc.dvcfile import Lockfile

    parsed = Parsed(Path(root))
    load_path = serialize.load_path

    def load_path_once(fs_path: str, fs: Any, **kwargs: Any) -> Any:
        if kwargs or getattr(fs, "protocol", None) != "local" or not parsed.inside(fs_path):
            return load_path(fs_path, fs, **kwargs)
        try:
            raw = Path(fs_path).read_bytes()
        except OSError:
            return load_path(fs_path, fs)  # DVC's own error
        return parsed.get(fs_path, raw, lambda: load_path(fs_path, fs))

    serialize.load_path = load_path_once  # dvc.parsing imports it from here when it reads `vars`
    param.load_path = load_path_once

    # a params dependency's values: DVC looks each key up by walking the whole file (dpath), every time it
    # hashes the dependency; the same file, keys and form give the same values
    read_param_file = param.read_param_file
    values: dict[tuple[str, str, tuple[str, ...] | None, bool], str] = {}

    def read_param_file_once(fs: Any, path: str, key_paths: list[str] | None = None, flatten: bool = False,
                             **kwargs: Any) -> Any:
        if kwargs or getattr(fs, "protocol", None) != "local" or not parsed.inside(path):
            return read_param_file(fs, path, key_paths, flatten=flatten, **kwargs)
        try:
            digest = hashlib.md5(Path(path).read_bytes(), usedforsecurity=False).hexdigest()
        except OSError:
            return read_param_file(fs, path, key_paths, flatten=flatten)
        key = (str(path), digest, tuple(key_paths) if key_paths is not None else None, flatten)
        if key not in values:
            found = read_param_file(fs, path, key_paths, flatten=flatten)
            if not plain(found):
                return found
            values[key] = json.dumps(found)
        return json.loads(values[key])

    param.read_param_file = read_param_file_once

    load_yaml = Lockfile._load_yaml

    def load_lock_once(self: Any, **kwargs: Any) -> tuple[Any, str]:
        if kwargs or getattr(self.repo.fs, "protocol", None) != "local" or not parsed.inside(self.path):
            return load_yaml(self, **kwargs)  # type: ignore[no-any-return]
        try:
            raw = Path(self.path).read_bytes()
        except OSError:
            return load_yaml(self)  # type: ignore[no-any-return]

        def parse() -> Any:
            data, text = load_yaml(self)  # with DVC's schema check
            return data if text.encode() == raw else None  # rewritten meanwhile: not kept

        data = parsed.get(self.path, raw, parse)
        if data is None:
            return load_yaml(self)  # type: ignore[no-any-return]
        return data, raw.decode()

    Lockfile._load_yaml = load_lock_once
    return parsed
