"""Warm starts (multitab.runtime.stage_server): a stage's command run by a fork of a warm process ends as it
ends in its own process (output, exit status, signals, files, environment, folder), the warm path is taken
(the module's heavy imports happen once for several commands) and left whenever it must be (no server, a
changed source file)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.warm_starts import running
from multitab.runtime import warm_command

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="warm starts are Linux-only")

PROBE = '''
import os, signal, sys, time
from pathlib import Path

WARM_IMPORTS = ("probe_heavy",)

def main():
    import probe_heavy  # noqa: F401
    what = sys.argv[1]
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("PROBE_VALUE"))
    print("to stderr", file=sys.stderr)
    Path("written.txt").write_text(what)
    if what == "exit3":
        sys.exit(3)
    if what == "raise":
        raise RuntimeError("probe failed")
    if what == "hard":
        sys.stdout.flush()
        os._exit(5)
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "wait":
        def stop(signum, _frame):
            Path("stopped.txt").write_text(str(signum))
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, stop)
        Path("ready.txt").write_text(str(os.getpid()))
        time.sleep(60)
    if what == "where":
        print("warm" if "multitab.runtime.stage_server" in " ".join(sys.orig_argv) else "cold")

if __name__ == "__main__":
    main()
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with this repository's `stages` package (its __init__ is the command's side of the warm start)
    and a probe stage whose heavy import appends a line to imports.log."""
    (tmp_path / "stages").mkdir()
    shutil.copy(ROOT / "stages" / "__init__.py", tmp_path / "stages" / "__init__.py")
    (tmp_path / "stages" / "probe.py").write_text(PROBE)
    (tmp_path / "probe_heavy.py").write_text(
        'import os\nwith open("imports.log", "a") as f:\n    f.write(f"{os.getpid()}\\n")\n'
    )
    return tmp_path


def _command(project: Path, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PROBE_VALUE": "v1", "PYTHONPATH": str(project)}
    env.update(kw.pop("env", {}))
    return subprocess.Popen([PY, "-m", "stages.probe", *args], cwd=project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _run(project: Path, *args: str, env: dict | None = None) -> tuple[int, str, str]:
    proc = _command(project, *args, env=env or {})
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _without_server() -> dict:
    return {warm_command.STAGE_SERVER_ENV: ""}


@pytest.mark.parametrize("what", ["ok", "exit3", "raise", "hard", "kill"])
def test_a_warm_command_ends_as_a_cold_one(project: Path, what: str) -> None:
    cold = _run(project, what, env=_without_server())
    (project / "written.txt").unlink()
    with running(str(project)) as path:
        assert path is not None
        warm = _run(project, what)
    assert warm[0] == cold[0], (warm, cold)
    assert warm[1] == cold[1]
    if what == "raise":  # the traceback's frames differ (runpy's below the server): its last line does not
        assert warm[2].strip().splitlines()[-1] == cold[2].strip().splitlines()[-1] == "RuntimeError: probe failed"
    else:
        assert warm[2] == cold[2]
    assert (project / "written.txt").read_text() == what
    assert {"ok": 0, "exit3": 3, "raise": 1, "hard": 5, "kill": -signal.SIGKILL}[what] == warm[0]


def test_the_warm_path_is_taken_and_imports_once(project: Path) -> None:
    with running(str(project)):
        results = [_run(project, "where") for _ in range(3)]
    assert all(r[0] == 0 and r[1].splitlines()[-1] == "warm" for r in results), results
    # the template imported probe_heavy once (WARM_IMPORTS); the three stages found it imported
    assert len((project / "imports.log").read_text().split()) == 1
    cold = _run(project, "where", env=_without_server())
    assert cold[1].splitlines()[-1] == "cold"


def test_no_server_runs_the_command_itself(project: Path, tmp_path: Path) -> None:
    gone = str(tmp_path / "no-such.sock")
    code, out, _ = _run(project, "where", env={warm_command.STAGE_SERVER_ENV: gone})
    assert code == 0 and out.splitlines()[-1] == "cold"


def test_a_changed_source_is_never_run_warm(project: Path) -> None:
    with running(str(project)):
        assert _run(project, "where")[1].splitlines()[-1] == "warm"
        probe = project / "stages" / "probe.py"
        probe.write_text(probe.read_text().replace('print("warm"', 'print("changed-warm"').replace(
            'else "cold")', 'else "changed-cold")'))
        os.utime(probe, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert _run(project, "where")[1].splitlines()[-1] == "changed-cold"  # declined: it ran cold
        assert _run(project, "where")[1].splitlines()[-1] == "changed-warm"  # a new template has the new code


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_sigterm_to_the_command_reaches_the_stage(project: Path) -> None:
    with running(str(project)):
        proc = _command(project, "wait")
        _wait_for(project / "ready.txt")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert (project / "stopped.txt").read_text() == str(signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM


def test_a_killed_command_stops_its_stage(project: Path) -> None:
    with running(str(project)):
        proc = _command(project, "wait")
        _wait_for(project / "ready.txt")
        stage_pid = int((project / "ready.txt").read_text())
        assert stage_pid != proc.pid  # the stage runs in a warm process, not the command's
        proc.kill()
        proc.communicate(timeout=30)
        _wait_for(project / "stopped.txt")  # the stage saw its command go and stopped as on SIGTERM
    assert (project / "stopped.txt").read_text() == str(signal.SIGTERM)


def test_the_peak_memory_reaches_the_flow(project: Path, tmp_path: Path) -> None:
    peak = tmp_path / "peak"
    with running(str(project)):
        code, _, _ = _run(project, "ok", env={warm_command.PEAK_FILE_ENV: str(peak)})
    assert code == 0
    assert warm_command.read_peak(str(peak)) > 1_000_000  # bytes: a Python process is some MB


def test_the_server_ends_with_its_block(project: Path) -> None:
    with running(str(project)) as path:
        assert path is not None and os.environ[warm_command.STAGE_SERVER_ENV] == path
        _run(project, "ok")
    assert warm_command.STAGE_SERVER_ENV not in os.environ
    assert not Path(path).exists()
    with running(str(project), enabled=False) as off:
        assert off is None and warm_command.STAGE_SERVER_ENV not in os.environ


def test_every_warm_import_named_exists() -> None:
    """A name in a module's WARM_IMPORTS that does not import would make its template decline every stage
    (each would then start cold, silently slower): each name must be found."""
    import ast
    import importlib.util

    from multitab.runtime.stage_server import WARM_RUNNERS

    files = sorted((ROOT / "stages").glob("[!_]*.py"))
    files += [ROOT / "src" / (name.replace(".", "/") + ".py") for name in WARM_RUNNERS]
    named = {}
    for path in files:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "WARM_IMPORTS" for t in node.targets):
                named[path.name] = ast.literal_eval(node.value)
    assert {"train.py", "synthesize.py"} <= named.keys()  # the runners import theirs from multitab.runtime.process
    from multitab.runtime.process import WARM_IMPORTS

    for module in [m for names in named.values() for m in names] + list(WARM_IMPORTS):
        assert importlib.util.find_spec(module) is not None, module
