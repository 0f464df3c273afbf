"""A process started for a run must not outlive the process that started it: Prefect's temporary server
and a stage's `dvc repro` (started by flows.pipeline), a stage's command (started by `dvc repro`). A
SIGKILL of the parent runs no handler in it, so the kernel is asked (Linux: PR_SET_PDEATHSIG) to send the
child SIGTERM when its parent dies. The stage's outputs are written atomically and its checkpoint after
every epoch, so a stage stopped this way resumes where it was at the next run.

DVC runs a stage's command as `$SHELL -c CMD` (/bin/sh when SHELL is unset). bash and zsh replace
themselves with the command; dash (Debian's /bin/sh) and fish do not, so the command's parent is the shell,
which has no such request and outlives DVC, and the command with it. The flow therefore runs DVC through
`python -m multitab.runtime.process DVC-ARGS` (`run_dvc`): that DVC adopts what its commands orphan (it is a
child subreaper, PR_SET_CHILD_SUBREAPER) and, on SIGTERM or SIGINT, stops every process below it before it
exits. It stays in the flow's process group, so Ctrl-C in a terminal still reaches the stage's command,
which says it was interrupted and exits 130 (stages/_common.py), also while it is still importing.

It exits by letting DVC finish what it is doing, never from inside the signal handler: a stop that lands
while DVC rewrites its lock table (its rwlock file) or dvc.lock would otherwise leave the file truncated,
and every later DVC command in the project would refuse to run (seen when a flow was stopped while a
stage command ended: the flow's handler signals DVC and the command at once, and DVC was releasing its
locks)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1
# what a `dvc repro` imports once it runs: a warm process of the flow's stage server (multitab.runtime.stage_server)
# that runs this module or multitab.files.lock_writes has them already
WARM_IMPORTS = ("dvc.cli", "dvc.repo", "dvc.repo.reproduce", "dvc.commands.repro", "dvc.stage", "dvc.stage.cache",
                "dvc.output", "dvc.dependency", "dvc.lock", "dvc.rwlock", "dvc.parsing", "dvc.dvcfile", "dvc.schema",
                "dvc.config", "dvc.fs", "dvc_data.index", "dvc_objects.fs", "scmrepo.git", "dulwich.repo", "sqlite3")
_PR_SET_CHILD_SUBREAPER = 36


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


def terminate_descendants(grace_seconds: float = 5.0) -> None:
    """SIGTERM every descendant process, then SIGKILL those still alive after `grace_seconds`.

    It waits without reaping: a child's exit status stays for whoever started it (DVC's or the flow's
    subprocess.Popen). Reaped here, it would be lost, and Popen reads a status it cannot collect as 0: DVC
    then took a stage stopped by Ctrl-C for one that succeeded and failed on its missing outputs ("does not
    exist"), which the flow reported as bad input."""
    import contextlib

    import psutil

    me = psutil.Process()
    children = me.children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    alive = _wait_ended(children, grace_seconds)
    # and whatever was started meanwhile (a subprocess already being spawned when the signal came)
    for child in [*alive, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            child.kill()


def _wait_ended(procs: list[Any], timeout: float) -> list[Any]:
    """The psutil processes of `procs` still running after at most `timeout` seconds; a zombie (ended, its
    status not yet collected by its parent) has ended."""
    import time

    import psutil

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if running(p)]
    return alive


# Whether a Ctrl-C came while starting (defer_ctrl_c_while_starting)
_ctrl_c_pending = False


def _defer_ctrl_c(signum: int, _frame: object) -> None:
    global _ctrl_c_pending
    if not _ctrl_c_pending:
        _ctrl_c_pending = True
        return
    argv = sys.orig_argv  # a second Ctrl-C: at once
    program = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else "python"
    os.write(2, f"{program}: stopped by SIGINT (Ctrl-C) while starting; run the same command again\n".encode())
    os._exit(128 + signum)


def defer_ctrl_c_while_starting() -> None:
    """Ctrl-C while a program still imports and reads what it needs (seconds: torch, pandas, DVC, Prefect)
    is remembered, not raised there: a KeyboardInterrupt raised inside some library's import prints a
    traceback, or comes out as another exception (pydantic's serialiser wraps it in its own). The program
    calls `raise_deferred_ctrl_c` where it can stop cleanly and `ctrl_c_raises` when its own handling
    begins; a second Ctrl-C ends it at once (one line, exit 130). An ignored SIGINT stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _defer_ctrl_c)


def raise_deferred_ctrl_c() -> None:
    """KeyboardInterrupt now if a Ctrl-C came while starting (`defer_ctrl_c_while_starting`)."""
    global _ctrl_c_pending
    if _ctrl_c_pending:
        _ctrl_c_pending = False
        raise KeyboardInterrupt


def ctrl_c_raises() -> None:
    """Ctrl-C raises KeyboardInterrupt again (Python's default), and one that came while starting is raised
    now."""
    if signal.getsignal(signal.SIGINT) is _defer_ctrl_c:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    raise_deferred_ctrl_c()


# the signal that stopped run_dvc (None: none yet); how long DVC may take to finish after it
_stopped_by: int | None = None
STOP_GRACE_SECONDS = 20.0


def _stop_below(signum: int, _frame: object) -> None:
    """SIGTERM or SIGINT in run_dvc: stop every process below, then return to DVC, which sees its command
    fail, releases its locks and returns (run_dvc then exits 128 + signum). A watchdog ends the process after
    STOP_GRACE_SECONDS in case DVC does not return (it was waiting for the repository lock, or it started a
    command after the signal). A second signal (the flow's SIGTERM after a terminal's Ctrl-C reached the
    whole process group) stops what runs below again; the first one's watchdog stays."""
    global _stopped_by
    import threading

    first = _stopped_by is None
    if first:
        _stopped_by = signum
    terminate_descendants()
    if not first:
        return

    def watchdog() -> None:
        import time

        time.sleep(STOP_GRACE_SECONDS)
        # Its second pass finds a command whose shell was stopped while starting it: adopted by this process.
        terminate_descendants()
        os._exit(128 + signum)

    threading.Thread(target=watchdog, name="multitab-stop-watchdog", daemon=True).start()


def become_subreaper() -> None:
    """Have this process adopt its orphaned descendants (Linux: PR_SET_CHILD_SUBREAPER) instead of init, so
    that they stay below it. Nothing happens off Linux."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)


def run_dvc(argv: list[str]) -> int:
    """DVC's command line (`dvc ARGV`) in this process, which adopts what its commands orphan and on SIGTERM
    or SIGINT first stops every process below it (the stage's shell and command), then lets DVC return (it
    releases its locks; a file it was writing is finished) and exits 128 + the signal. DVC itself has no
    SIGTERM handler: killed, it would leave a command that a non-exec'ing shell keeps out of reach of its
    own PR_SET_PDEATHSIG. Left to DVC, SIGINT raises KeyboardInterrupt wherever DVC is, which may be inside
    the rewrite of its lock table; while a command runs DVC ignores SIGINT (the command gets its own)."""
    become_subreaper()
    signal.signal(signal.SIGTERM, _stop_below)
    signal.signal(signal.SIGINT, _stop_below)
    from dvc.cli import main

    rc = int(main(argv) or 0)
    if _stopped_by is not None:  # DVC's own status says its command failed; say why instead
        terminate_descendants()
        return 128 + _stopped_by
    return rc


if __name__ == "__main__":
    sys.exit(run_dvc(sys.argv[1:]))
