"""What `dvc repro` printed: each line's log level, the stage's exit code, the cause of a failure in one
line, and whether DVC ran the stage, found it up to date or restored it from its run cache. Regexes over
DVC's messages (dvc/stage/__init__.py, dvc/stage/cache.py, dvc/lock.py); no Prefect."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from flows.memory import wait_peak
from multitab.runtime.process import die_with_parent

# DVC's messages for a stage that did not run its command (dvc/stage/__init__.py, dvc/stage/cache.py).
_UP_TO_DATE = re.compile(r"'.*' didn't change, skipping")
_RESTORED = re.compile(r"Stage '.*' is cached - skipping run")
# DVC's lock failures (dvc/lock.py, dvc/rwlock.py): transient under parallel runs, never the stage's fault.
LOCK_ERROR = re.compile(r"Unable to acquire lock|is busy, it is being blocked by")
# DVC's line for a stage command that failed: the stage's own exit status (dvc/stage/exceptions.py).
_CMD_EXIT = re.compile(r"failed to run: .*, exited with (-?\d+)")
# DVC's errors before a stage's command runs that no retry can change: a dependency that is not there, a
# path it may not read or that loops, a malformed dvc.yaml / params.yaml (dvc/stage, dvc/dependency).
_DVC_BAD_INPUT = re.compile(
    r"does not exist|missing data 'source'|No such file or directory|Permission denied|Too many levels of "
    r"symbolic links|[Cc]yclic|[Cc]ircular|already specified|overlaps with|duplicate key|while parsing|"
    r"failed to parse|is outside of|is not a valid"
)
# Lines that report an error: DVC's ERROR lines, a stage's `[stage] error: ...` (stages/_common.py) or
# ERROR/CRITICAL log records, the last line of a traceback.
_DVC_ERROR = re.compile(r"^ERROR:\s*(.*)")
_STAGE_ERROR = re.compile(r"^\[[^\]]+\] error: (.*)")
_STAGE_LOG_ERROR = re.compile(r"^\[[^\]]+\] (?:ERROR|CRITICAL) ")
_STAGE_LOG_WARNING = re.compile(r"^\[[^\]]+\] WARNING ")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?\s*(.*)")
_VALIDATION_HEAD = re.compile(r"expectations? failed")
_DVC_CHATTER = re.compile(
    r"^(Running stage|> |Stage '|Updating lock|Generating lock|To track|To enable|Use `dvc|\s*git add|\s*dvc config)"
)
_CAUSE_CHARS = 300
# DVC's errors for a full disk name no path ("[Errno 28] No space left on device"), or, for a file it copied
# into its cache with shutil, the copy's source and target ("...: '<src>' -> '<target>'").
_NO_SPACE = re.compile(r"\[Errno (?:28|122)\]|No space left on device|Disk quota exceeded")
_NO_SPACE_AT = re.compile(r"(?:No space left on device|Disk quota exceeded): '([^']+)'(?: -> '([^']+)')?")


class _Lines:
    """Sorts a stage's output lines into log levels as they arrive (DVC's and the stage's errors at ERROR,
    a traceback and a validation failure list with them)."""

    def __init__(self) -> None:
        self.block = False  # inside a traceback or a list of failed expectations

    def level(self, line: str) -> int:
        import logging

        if line.startswith("Traceback (most recent call last)") or _VALIDATION_HEAD.search(line):
            self.block = True
            return logging.ERROR
        if self.block:
            if line[:1].isspace():
                return logging.ERROR
            self.block = False
            if _EXCEPTION.match(line):
                return logging.ERROR
        if _DVC_ERROR.match(line) or _STAGE_ERROR.match(line) or _STAGE_LOG_ERROR.match(line):
            return logging.ERROR
        if _STAGE_LOG_WARNING.match(line) or line.startswith("WARNING:"):
            return logging.WARNING
        return logging.INFO


def stream_command(cmd: list[str], cwd: str, env: dict[str, str], log: Any) -> tuple[int, list[str], int]:
    """Run `cmd`, sending each output line to the Prefect task log as it arrives, at its level; the
    command is stopped if this process dies (`die_with_parent`). Returns its exit status, its lines and
    the peak resident memory (bytes) of the largest process it and its descendants ran (flows/memory.py)."""
    lines: list[str] = []
    levels = _Lines()
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        preexec_fn=die_with_parent,
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                lines.append(line)
                log.log(levels.level(line), "%s", line)
        proc.returncode, peak = wait_peak(proc.pid)
        return proc.returncode, lines, peak


def exit_code(lines: list[str], rc: int) -> int:
    """The stage command's own exit status from DVC's message; BAD_INPUT when DVC failed before running it
    for a reason in the project's files (a missing dependency, a malformed dvc.yaml: a retry cannot help);
    else `dvc repro`'s (255 for any other failure)."""
    from multitab.runtime.exit_codes import BAD_INPUT

    for line in reversed(lines):
        if m := _CMD_EXIT.search(line):
            return int(m.group(1))
    if rc != 0 and any(_DVC_BAD_INPUT.search(m.group(1)) for line in lines if (m := _DVC_ERROR.match(line))):
        return BAD_INPUT
    return rc


def cause(lines: list[str], code: int = 1) -> str:
    """One line saying why a stage failed: the stage's own error line (`[stage] error: ...`; for a failed
    validation, its first failed expectation), else an exception's last line, else the stage's last
    output line, else the signal that killed it, else DVC's error."""
    found = [m.group(1) for line in lines if (m := _STAGE_ERROR.match(line))]
    if not found:
        found = [line for line in lines if _EXCEPTION.match(line)]
    if not found:
        found = [line for line in lines if not (_DVC_ERROR.match(line) or _DVC_CHATTER.match(line))]
    if not found and code < 0:
        try:
            found = [f"killed by {signal.Signals(-code).name} (out of memory, or stopped by hand)"]
        except ValueError:
            found = [f"killed by signal {-code}"]
    if not found:
        found = [m.group(1) for line in lines if (m := _DVC_ERROR.match(line))]
    text = found[-1].strip() if found else "no output"
    return text if len(text) <= _CAUSE_CHARS else text[: _CAUSE_CHARS - 3] + "..."


def disk_full(lines: list[str], root: str | Path) -> str | None:
    """One line for a `dvc repro` whose own writes (the outputs into its cache, dvc.lock) found the disk
    full: what DVC was writing when its message names it, DVC's cache folder and the project with the space
    left on each, and what to do; None when DVC reported no full disk. (A stage's own full disk is its own
    line: multitab.files.io.DiskFullError.)"""
    errors = [m.group(1) for line in lines if (m := _DVC_ERROR.match(line))]
    if not any(_NO_SPACE.search(e) for e in errors):
        return None
    named = [m.groups() for e in errors if (m := _NO_SPACE_AT.search(e))]
    root = Path(root)
    cache = root / ".dvc" / "cache"
    with contextlib.suppress(Exception):  # DVC's own answer (`dvc cache dir`), else its default
        from dvc.repo import Repo

        with Repo(str(root)) as repo:
            cache = Path(repo.cache.local_cache_dir or cache)
    free, devices = [], set()
    for name, path in (("DVC's cache", cache), ("the project", root)):
        on = next((p for p in (path, *path.parents) if p.exists()), path)  # a cache not made yet: its disk
        with contextlib.suppress(OSError):
            if os.stat(on).st_dev not in devices:
                devices.add(os.stat(on).st_dev)
                free.append(f"{name} {path}: {shutil.disk_usage(on).free / 1e6:.1f} MB free")
    if not named:
        what = "saving the stage's outputs into its cache or writing dvc.lock"
    elif named[-1][1] is None:
        what = f"writing {named[-1][0]}"
    else:  # a copy into the cache: its target is a temporary name there, its source the output
        what = f"copying {named[-1][0]} to {Path(named[-1][1]).parent}"
    return (f"no space left on device for DVC {what} ({'; '.join(free) or cache}); free some space, or move "
            "DVC's cache to a larger disk (`dvc cache dir <folder>`), and run again")


def dvc_outcome(lines: list[str]) -> str:
    text = "\n".join(lines)
    return "up_to_date" if _UP_TO_DATE.search(text) else "restored" if _RESTORED.search(text) else "ran"
