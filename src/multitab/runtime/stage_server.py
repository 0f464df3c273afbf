"""Warm starts: a stage's command (`python -m stages.<name> ...`) and the flow's `dvc repro` of the stage without
importing torch, pandas, Great Expectations or DVC again in each process (2-3 s of each of a `make repro`'s 134
stages; docs/orchestration.md, "Warm starts").

The flow starts `python -m multitab.runtime.stage_server SOCKET` for a run (flows/warm_starts.py) and names
SOCKET in the environment (`STAGE_SERVER_ENV`) of each stage's DVC, which it starts through
`python -m multitab.runtime.warm_command RUNNER ...`. A stage's command, started by DVC as always, finds it
while Python imports the `stages` package (stages/__init__.py). Either sends its module, arguments, folder,
environment and standard streams to the server (multitab.runtime.warm_command.forward) and waits. The server
keeps one warm process per module (its "template": it imported the module and the modules it names in
`WARM_IMPORTS`, which it would import only once it runs) and forks it; the fork takes the command's streams,
environment, folder and arguments and runs the module as `python -m` would (runpy, `__main__`), then ends as
an interpreter ends (exit handlers, flushed streams). Its exit status, or the signal that ended it, becomes
the command's own, so DVC and the flow see what they saw before; its peak resident memory goes to the file
the flow names in `PEAK_FILE_ENV` (the command's own process is small).

Signals: SIGINT, SIGTERM and SIGHUP sent to the command reach the forked process; if the command dies
(SIGKILL), the forked process gets SIGTERM (it watches the connection); the server and the templates end
with the flow (PR_SET_PDEATHSIG), and a template ends after IDLE_SECONDS with nothing to run.

Whenever the warm path cannot be taken the command runs in its own process as before: no server named or
reachable, a template that cannot import its module (the command's own run then shows the error), a GPU
stage (the flow does not name the server to those: CUDA must start in the stage's own process), a command
with interpreter options, or a source file of the checkout changed since the template imported it (the
template ends; the next request gets a new one).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from multitab.runtime.warm_command import MAX_MESSAGE, kill

IDLE_SECONDS = 60.0
# what a template may run besides the stages (`stages.<name>`): the flow's runners of a stage's DVC
WARM_RUNNERS = ("multitab.files.lock_writes", "multitab.runtime.process")


class _Template:
    """A warm process for one module: its end of a socket pair (requests go in, with the connection and the
    streams as file descriptors) and its pid."""

    def __init__(self, module: str, pid: int, sock: socket.socket) -> None:
        self.module, self.pid, self.sock = module, pid, sock


def serve(path: str) -> tuple[socket.socket, dict, list[int]]:
    """Accept requests on the socket `path` until SIGTERM (or the parent's death); hand each to its module's
    template. Returns only in a stage's process (forked by a template): its connection, request and
    streams."""
    from multitab.runtime.process import die_with_parent

    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the stages through their commands
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    templates: dict[str, _Template] = {}
    signal.signal(signal.SIGCHLD, lambda *_: None)  # templates that ended: reaped below
    while True:
        _reap_templates(templates)
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        conn.settimeout(10.0)  # a command sends its request at once: one that does not must not hold the others
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE, 3)
        except OSError:  # socket.timeout included
            conn.close()
            continue
        conn.settimeout(None)
        try:
            request = json.loads(data) if data else {}
        except ValueError:
            request = {}
        module = str(request.get("module", ""))
        for _attempt in range(2):  # a template that ended meanwhile (idle, or a changed source) is replaced
            template = templates.get(module)
            if template is None:
                template = _start_template(module, [listener, conn, *fds], templates)
                if isinstance(template, tuple):  # in the template's process: its loop returned a stage
                    return template
                templates[module] = template
            try:
                socket.send_fds(template.sock, [data], [conn.fileno(), *fds])
                break
            except OSError:
                templates.pop(module, None)
                template.sock.close()
        for fd in fds:
            os.close(fd)
        conn.close()  # the template has its own copy; unsent, the command sees it closed and runs itself


def _reap_templates(templates: dict[str, _Template]) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for module, template in list(templates.items()):
            if template.pid == pid:
                template.sock.close()
                del templates[module]


def _start_template(module: str, server_files: list, templates: dict[str, _Template]):
    """Fork a template for `module`. In the server: the _Template. In the template's process: never returns
    until one of its forks is a stage's process, then that stage's (connection, request, streams). The
    template closes the server's files (`server_files`: the listening socket, the request being handled and
    its streams, sockets or fds): a copy of a command's stdout kept open would keep DVC waiting for its end."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid:
        theirs.close()
        return _Template(module, pid, ours)
    ours.close()
    for f in server_files:
        f.close() if isinstance(f, socket.socket) else os.close(f)
    for other in templates.values():
        other.sock.close()
    return _template_loop(module, theirs)


def _template_loop(module: str, sock: socket.socket) -> tuple[socket.socket, dict, list[int]]:
    """Import `module` (and its WARM_IMPORTS), then fork a stage's process per request. Requests whose
    module cannot be imported here, or that arrive after a project source file changed, are declined (the
    command runs itself); the template then ends."""
    import importlib
    import selectors

    from multitab.runtime.process import die_with_parent

    die_with_parent()
    importable = (module.startswith("stages.") and module.count(".") == 1) or module in WARM_RUNNERS
    try:
        if not importable:
            raise ImportError(module)
        mod = importlib.import_module(module)
        for name in getattr(mod, "WARM_IMPORTS", ()):
            importlib.import_module(name)
        sources = _project_sources()
    except BaseException:  # noqa: BLE001 - any failure: the command runs itself and shows it
        sources = None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    running: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    while True:
        events = selector.select(timeout=None if running else IDLE_SECONDS)
        _reap_stages(running)
        if not events and not running:
            os._exit(0)  # idle
        if not any(key.fileobj is sock for key, _ in events):
            os.read(wake_r, 512) if events else None
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
        except OSError:
            data, fds = b"", []
        if not data or not fds:  # the server is gone
            for fd in fds:
                os.close(fd)
            if not running:
                os._exit(0)
            continue
        conn = socket.socket(fileno=fds[0])
        streams = fds[1:]
        if sources is None or _changed(sources):
            _decline(conn, streams)
            break
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
            sock.close()
            for other in running.values():
                other.close()
            return conn, json.loads(data), streams
        running[pid] = conn
        for fd in streams:
            os.close(fd)
        try:
            conn.send(json.dumps({"pid": pid}).encode())
        except OSError:
            kill(pid, signal.SIGTERM)
    # declined: no more requests (the server's next send fails and it starts a new template); the stages
    # still running end first
    sock.close()
    _reap_stages(running, block=True)
    os._exit(0)


def _decline(conn: socket.socket, streams: list[int]) -> None:
    for fd in streams:
        os.close(fd)
    try:
        conn.send(json.dumps({"declined": True}).encode())
    except OSError:
        pass
    conn.close()


def _reap_stages(running: dict[int, socket.socket], block: bool = False) -> None:
    """Collect the stages' processes that ended (`block`: all of them, waiting) and send each one's status and
    peak memory to its command."""
    for pid in list(running):
        try:
            done, status, usage = os.wait4(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done, status, usage = pid, 1 << 8, None
        if done == 0:
            continue
        conn = running.pop(pid)
        message = {"status": status, "maxrss_kb": usage.ru_maxrss if usage is not None else 0}
        try:
            conn.send(json.dumps(message).encode())
        except OSError:
            pass
        conn.close()


def _project_sources() -> dict[str, float]:
    """The modification times of the imported modules' files under this checkout (stages/, src/): a
    template must not run code older than what DVC hashed for the stage."""
    root, venv = os.getcwd() + os.sep, sys.prefix + os.sep
    found: dict[str, float] = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if path and (full := os.path.abspath(path)).startswith(root) and not full.startswith(venv):
            try:
                found[path] = os.stat(path).st_mtime_ns
            except OSError:
                pass
    return found


def _changed(sources: dict[str, float]) -> bool:
    for path, mtime in sources.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def become_stage(conn: socket.socket, request: dict, streams: list[int]) -> None:
    """In the forked stage process: take the command's streams, environment, folder and arguments; watch
    the command (it died: SIGTERM here); restore the default signal dispositions."""
    import threading

    from multitab.runtime.process import die_with_parent

    for target, fd in zip(request.get("streams", []), streams, strict=False):
        os.dup2(fd, int(target))
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [request["module"], *request["argv"]]
    for signum in (signal.SIGINT,):
        signal.signal(signum, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    die_with_parent()

    def watch() -> None:
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)  # the command is gone (SIGKILL, or its DVC): stop as it would

    threading.Thread(target=watch, name="multitab-stage-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    """`python -m multitab.runtime.stage_server SOCKET`: serve until SIGTERM; in a stage's process, run the
    stage's module as `python -m` does and end like an interpreter."""
    import runpy

    conn, request, streams = serve(argv[0])
    become_stage(conn, request, streams)
    module = request["module"]
    sys.modules.pop(module, None)  # executed afresh as __main__, as `python -m` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
