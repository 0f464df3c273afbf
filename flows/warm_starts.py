"""The flow's side of warm starts (multitab.runtime.stage_server): the server started for a run and named in
the environment its stages' `dvc repro` inherit."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from multitab.runtime.warm_command import STAGE_SERVER_ENV


@contextlib.contextmanager
def running(root: str, enabled: bool = True, log: Any = None) -> Iterator[str | None]:
    """Start the server for the checkout `root` and name it in this process's environment (which the stages'
    `dvc repro` inherit) until the block ends; then stop it. Yields the socket's path, or None when
    `enabled` is false or the server did not come up within 10 s (the stages then start cold, as before).
    `log`: a logger told which."""
    if not enabled or not sys.platform.startswith("linux"):
        yield None
        return
    import shutil
    import subprocess
    import tempfile
    import time

    from multitab.runtime.process import die_with_parent

    folder = tempfile.mkdtemp(prefix="multitab-stages-")
    path = os.path.join(folder, "server.sock")
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "multitab.runtime.stage_server", path], cwd=root, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent,
    )
    deadline = time.monotonic() + 10.0
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    up = os.path.exists(path) and proc.poll() is None
    before = os.environ.get(STAGE_SERVER_ENV)
    if up:
        os.environ[STAGE_SERVER_ENV] = path
    if log is not None:
        log.info("stage server %s (orchestration.stage_server)", "up: stages start warm" if up else
                 "did not start: stages start cold")
    try:
        yield path if up else None
    finally:
        if before is None:
            os.environ.pop(STAGE_SERVER_ENV, None)
        else:
            os.environ[STAGE_SERVER_ENV] = before
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
