"""The sha256 of a run's processed files (its checkpoints' fingerprint names its data by them), computed
once per process and in the background while the data load.

At the paper's size the processed AliExpress folder is ~5 GB: hashing it takes as long as a few seconds
to tens of seconds, on the way to the first training step. `hash_in_background(folder)` starts it in a
thread before the data are read (file reads and hashlib release the GIL, so it runs beside the reader on
another core); `data_hashes(folder)` then waits for what is still running. A file is hashed once per
process (the seeds of a stacked run share one data folder): it is known by its path, size and
modification time.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from pathlib import Path

from multitab.files.io import sha256_file

_HASHES: dict[tuple[str, int, int], Future[str]] = {}
_LOCK = threading.Lock()
_QUEUE: queue.SimpleQueue[tuple[Future[str], Path]] = queue.SimpleQueue()
_WORKER: list[threading.Thread] = []


def _work() -> None:
    """One file after another (one core: the reader has the others)."""
    while True:
        future, path = _QUEUE.get()
        try:
            future.set_result(sha256_file(path))
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the hash (an OSError, mostly)
            future.set_exception(e)


def _file_hash(path: Path) -> Future[str]:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _LOCK:
        future = _HASHES.get(key)
        if future is None:
            future = _HASHES[key] = Future()
            _QUEUE.put((future, path))
            if not _WORKER:
                # a daemon thread: a stage that stops early does not wait for a hash nobody needs any more
                _WORKER.append(threading.Thread(target=_work, name="multitab-sha256", daemon=True))
                _WORKER[0].start()
    return future


def _files(folder: Path) -> list[Path]:
    return [p for p in sorted(Path(folder).iterdir()) if p.is_file()]


def hash_in_background(folder: str | Path) -> None:
    """Start hashing every file of `folder` (threads; `data_hashes` collects)."""
    for path in _files(Path(folder)):
        _file_hash(path)


def data_hashes(folder: str | Path) -> dict[str, str]:
    """{file name: sha256} of every file of `folder`, waiting for hashes still being computed."""
    futures = {p.name: _file_hash(p) for p in _files(Path(folder))}
    return {name: f.result() for name, f in futures.items()}
