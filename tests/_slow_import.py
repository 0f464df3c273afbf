"""An import made slow in a subprocess, to interrupt a program while it is still importing: a
sitecustomize.py (put first on the child's PYTHONPATH) that, in the process whose command line names
`program`, touches a marker file when `module` starts importing, then sleeps `seconds`. That process gets
Python's Ctrl-C handler even where the test run inherited an ignored SIGINT (a background job), as a
program started in a terminal has it."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

_SITECUSTOMIZE = textwrap.dedent("""
    import importlib.abc, os, sys, time

    class _Slow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == os.environ["SLOW_IMPORT"]:
                sys.meta_path.remove(self)
                open(os.environ["SLOW_IMPORT_MARK"], "w").close()
                time.sleep(float(os.environ["SLOW_IMPORT_SECONDS"]))
            return None

    if os.environ.get("SLOW_IMPORT_IN") in sys.orig_argv:
        sys.meta_path.insert(0, _Slow())
        # A terminal's foreground program has Python's Ctrl-C handler; one started from a background job
        # (`nohup make test &`) inherits an ignored SIGINT, which the program rightly leaves ignored, and
        # the tests' Ctrl-C would then do nothing. The program here is the terminal's.
        import signal
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
""")


def slow_import_env(folder: Path, program: str, module: str, env: dict[str, str] | None = None,
                    seconds: float = 2.0) -> tuple[dict, Path]:
    """The environment for a child process in which `module`'s import blocks in `program` (a word of its
    command line, e.g. "flows.pipeline"), and the marker file that appears when it does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    mark = folder / "importing"
    env = dict(os.environ if env is None else env)
    path = env.get("PYTHONPATH", os.pathsep.join(sys.path))
    env |= {"PYTHONPATH": os.pathsep.join([str(folder), path]), "SLOW_IMPORT": module,
            "SLOW_IMPORT_MARK": str(mark), "SLOW_IMPORT_IN": program,
            "SLOW_IMPORT_SECONDS": str(seconds)}
    return env, mark
