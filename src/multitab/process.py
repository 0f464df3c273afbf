"""A process started for a run must not outlive the process that started it: Prefect's temporary server
and a stage's `dvc repro` (started by flows.pipeline), a stage's command (started by `dvc repro`). A
SIGKILL of the parent runs no handler in it, so the kernel is asked (Linux: PR_SET_PDEATHSIG) to send the
child SIGTERM when its parent dies. The stage's outputs are written atomically and its checkpoint after
every epoch, so a stage stopped this way resumes where it was at the next run."""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask for SIGTERM when the parent dies. Call it in the child itself, or between fork and exec
    (Popen's preexec_fn). The kernel sends it when the parent *thread* that forked the child exits: fork
    from a thread that outlives the child (the main thread, or one that waits for the child). Nothing
    happens off Linux."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_with_parent() -> None:
    """`die_with_parent` for the calling process, and stop now if the parent is already gone (it may have
    died before the request was made: this process was then adopted by init or a subreaper)."""
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)
