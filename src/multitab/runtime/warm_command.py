"""The command's side of a warm start (multitab.runtime.stage_server has the whole story): `python -m
stages.<name> ...` hands its arguments, folder, environment and standard streams to the flow's stage server and
ends as the stage ended. Standard library only, and little of it: this is all such a command imports.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

STAGE_SERVER_ENV = "MULTITAB_STAGE_SERVER"  # the server's socket, set by the flow (flows/warm_starts.py)
PEAK_FILE_ENV = "MULTITAB_STAGE_PEAK_FILE"  # where the command writes its stage's peak memory for the flow
MAX_MESSAGE = 1 << 20  # a request: argv, folder and environment (a few kB)
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def forward(module: str, args: list[str]) -> int | None:
    """Run `python -m module args` in a warm process of the server named by STAGE_SERVER_ENV and return
    the exit status to end with (a negative number: the signal that ended the stage, re-raised by `finish`);
    None when no warm process took it (no server, or it declined): run the module here as usual."""
    path = os.environ.get(STAGE_SERVER_ENV)
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        streams = [fd for fd in (0, 1, 2) if _is_open(fd)]
        request = {"module": module, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ), "streams": streams}
        socket.send_fds(conn, [json.dumps(request).encode()], streams)
        started = _receive(conn)
    except OSError:
        started = None
    if not started or "pid" not in started:  # nothing ran: the server is gone, or it declined
        conn.close()
        return None
    pid = int(started["pid"])
    for signum in _FORWARDED:
        signal.signal(signum, lambda s, _f: kill(pid, s))
    try:
        ended = _receive(conn)
    except OSError:
        ended = None
    if ended is None:  # the server died under the stage, which then got SIGTERM from its template
        os.write(2, f"[stage server] {module}: the warm process was lost; run the stage again\n".encode())
        return 1
    _write_peak(int(ended.get("maxrss_kb", 0)) * 1024)
    status = int(ended["status"])
    return os.waitstatus_to_exitcode(status)


def finish(code: int) -> None:
    """End this process with the stage's exit status `code` from `forward`; a signal's (negative) is raised
    on this process, so that its parent sees the same end as the stage's."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _receive(conn: socket.socket) -> dict | None:
    data = conn.recv(MAX_MESSAGE)
    return json.loads(data) if data else None


def _write_peak(peak_bytes: int) -> None:
    """Raise the peak in PEAK_FILE_ENV's file to `peak_bytes` (a warm DVC and its warm stage both report)."""
    path = os.environ.get(PEAK_FILE_ENV)
    if path and peak_bytes > read_peak(path):
        try:
            with open(path, "w") as f:
                f.write(str(peak_bytes))
        except OSError:
            pass


def read_peak(path: str) -> int:
    """The peak resident memory (bytes) a warm stage's command wrote to `path` (PEAK_FILE_ENV); 0 if none."""
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


if __name__ == "__main__":
    # `python -m multitab.runtime.warm_command MODULE ARGS...`: `python -m MODULE ARGS...`, warm when the flow's
    # server takes it (the flow starts each stage's DVC so: multitab.files.lock_writes, multitab.runtime.process)
    code = forward(sys.argv[1], sys.argv[2:])
    if code is not None:
        finish(code)
    import runpy

    del sys.argv[0]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
