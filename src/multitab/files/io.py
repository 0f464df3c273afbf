"""Atomic, crash-safe output: every file is written to a temporary name beside it (`.<name>.<random>.tmp`),
flushed to disk (fsync), renamed into place and the rename made durable (fsync of the folder), so a crash
or power loss leaves the old output or the new one, never half of one. A temporary left by a killed
writer is removed by `remove_stale_temporaries` at the next start of whoever owns the folder. A full disk
raises `DiskFullError` ("no space left on <path> (needed ~N MB)"), an OSError that stages print as one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# the YAML loader lives in yaml_data; these names stay importable from here
from multitab.files.yaml_data import load_yaml, read_yaml_file, yaml_problem  # noqa: F401
from multitab.markup import spreadsheet_frame

TMP_SUFFIX = ".tmp"
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once, at import: mkstemp / mkdtemp create private (0600 / 0700) temporaries


class DiskFullError(OSError):
    """ENOSPC (or EDQUOT) while writing `path`; `needed_bytes` is what the write needed (an estimate when
    the writer could not say: the bytes written before the failure)."""

    def __init__(self, path: Path, needed_bytes: int | None) -> None:
        self.path, self.needed_bytes = path, needed_bytes
        parts = [f"needed ~{_megabytes(needed_bytes)} MB"] if needed_bytes is not None else []
        with contextlib.suppress(OSError):
            parts.append(f"{_megabytes(shutil.disk_usage(path.parent).free)} MB free")
        detail = f" ({', '.join(parts)})" if parts else ""
        super().__init__(errno.ENOSPC, f"no space left on {path}{detail}; free some space and run again")

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno 28]" prefix
        return str(self.args[1])


def _megabytes(n: int) -> str:
    mb = n / 1e6
    return f"{mb:.1f}" if mb >= 0.1 else f"{mb:.2g}"


def _is_disk_full(e: BaseException) -> bool:
    # some libraries (pyarrow) raise an OSError without errno, with the C library's message
    return isinstance(e, OSError) and (e.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(e))


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems cannot fsync a folder; the data itself was synced
        if e.errno not in (errno.EINVAL, errno.EBADF) or not path.is_dir():
            raise
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(folder) / name)
        _fsync_path(Path(folder))


def remove_stale_temporaries(folder: str | Path, name: str | None = None, *, stems: tuple[str, ...] = (),
                             before: float | None = None) -> list[Path]:
    """Remove the `.<name>.*.tmp` files and folders that a killed `atomic_path` / `atomic_dir` left in
    `folder` (and `.<name>.old` of an interrupted folder swap): all of them, only those of output `name`,
    or (`stems`) those of outputs whose names start with one of `stems` (a stage's files in a folder it
    shares). A temporary of a temporary (`..<name>.<random>.tmp.columns.<random>.tmp`: scratch a writer kept
    beside its own temporary folder) is `name`'s too. `before`: only what was last modified before this time
    (seconds since the epoch), so that a writer started since is left alone. Call it only for what one writer
    owns (a stage's output folder, or its outputs in a shared folder: DVC locks the stage). Returns what it
    removed."""
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    prefixes = tuple(f".{s}" for s in stems) if stems else ("." if name is None else f".{name}.",)
    for p in folder.iterdir():
        own = p.name.startswith(".") and ("." + p.name.lstrip(".")).startswith(prefixes)
        if own and (p.name.endswith(TMP_SUFFIX) or p.name.endswith(".old")):
            if before is not None and p.lstat().st_mtime >= before:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def replace_durably(src: str | Path, dst: str | Path) -> None:
    """Flush the finished file `src` to disk, rename it onto `dst` (same file system) and flush the folder,
    so that after a crash `dst` is the old file or the whole new one. A full disk: `DiskFullError`."""
    src, dst = Path(src), Path(dst)
    try:
        _fsync_path(src)
        os.replace(src, dst)
        _fsync_path(dst.parent)
    except OSError as e:
        if _is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(dst, _size(src) if src.exists() else None) from e
        raise


# Set inside `all_or_nothing`: the (temporary, target) pairs whose renames wait for the block's end.
_PENDING: contextvars.ContextVar[list[tuple[Path, Path]] | None] = contextvars.ContextVar("_PENDING", default=None)


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """Files written through `atomic_path` inside the block replace their targets only when the whole block
    has succeeded, one rename after the other at its end: a reader finds all the old outputs or all the new
    ones, never a mix (a kill during the final renames, milliseconds, is the one window). An error or a kill
    before then changes no target; the temporaries of a killed block are removed by
    `remove_stale_temporaries` at the next start."""
    pending: list[tuple[Path, Path]] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _PENDING.reset(token)
    for tmp, dst in pending:
        replace_durably(tmp, dst)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, expected_bytes: int | None = None) -> Iterator[Path]:
    """Yield a temporary path in the same folder; if the block succeeds, fsync it, rename it onto `path`
    and fsync the folder. A full disk raises `DiskFullError` naming `path` and `expected_bytes` (default:
    what the block had written when it failed); the temporary is always removed."""
    path = Path(path)
    tmp_path: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # the mode a plain open() would give the output
        yield tmp_path
        pending = _PENDING.get()
        if pending is not None:  # inside all_or_nothing: renamed with the others at its end
            _fsync_path(tmp_path)
            pending.append((tmp_path, path))
            tmp_path = None
        else:
            replace_durably(tmp_path, path)
    except OSError as e:
        if _is_disk_full(e) and not isinstance(e, DiskFullError):
            needed = expected_bytes if expected_bytes is not None else (_size(tmp_path) if tmp_path else None)
            if tmp_path is not None:  # before measuring what is free
                tmp_path.unlink(missing_ok=True)
            raise DiskFullError(path, needed) from e
        raise
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, expected_bytes: int | None = None) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success its files are fsynced and it replaces `path` as a whole
    (old contents removed). Disk full: as `atomic_path`."""
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent))
        os.chmod(tmp, 0o777 & ~_UMASK)
        yield tmp
        _fsync_tree(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_path(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        if _is_disk_full(e):
            # a file of the folder that says it was being written (`disk_full_names`) is named where it goes
            named = e.path if isinstance(e, DiskFullError) else path
            if tmp is not None and named.is_relative_to(tmp):
                named = path / named.relative_to(tmp)
            needed = e.needed_bytes if isinstance(e, DiskFullError) else (
                expected_bytes if expected_bytes is not None else (_size(tmp) if tmp else None))
            if tmp is not None:  # before measuring what is free
                shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(e, DiskFullError) or named != e.path:
                raise DiskFullError(named, needed) from e
        raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def disk_full_names(path: str | Path) -> Iterator[None]:
    """A full disk inside the block raises `DiskFullError` naming `path`, the file the block writes (a file
    of an `atomic_dir` folder, which names it where it goes), with what it had written as what was needed."""
    try:
        yield
    except OSError as e:
        if _is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(Path(path), _size(Path(path))) from e
        raise


def _write_chunks(f: Any, data: bytes | memoryview, chunk_bytes: int = 1 << 24) -> None:
    """Write `data` to the open binary file `f` (the one place `write_bytes` touches the disk)."""
    view = memoryview(data)
    for start in range(0, len(view), chunk_bytes):
        f.write(view[start:start + chunk_bytes])


def write_bytes(path: str | Path, data: bytes | memoryview) -> None:
    """Write `data` to `path` atomically and durably (a full disk: `DiskFullError` with the exact size)."""
    with atomic_path(path, expected_bytes=len(data)) as tmp, open(tmp, "wb") as f:
        _write_chunks(f, data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_csv(path: str | Path, frame: Any, **to_csv: Any) -> Path:
    """A pandas DataFrame as CSV (`index=False` unless given; `to_csv` goes to DataFrame.to_csv), atomically,
    its header and text cells spreadsheet-safe (multitab.markup.spreadsheet_frame: a task named `=HYPERLINK(..)`
    is not a formula); returns `path`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        spreadsheet_frame(frame).to_csv(tmp, **{"index": False, **to_csv})
    return path


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks (files may be several GB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            h.update(chunk)
    return h.hexdigest()


def read_json(path: str | Path) -> Any:
    """A JSON file; ValueError naming it when it is not JSON (cut short, edited, not text)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path}: not readable JSON ({e}); it was cut short or edited: write it again (run the "
                         "stage that writes it)") from None
