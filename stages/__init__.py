"""Thin command-line entry points, one per DVC stage (paths come from dvc.yaml)."""

import sys

if sys.argv[:1] == ["-m"]:  # `python -m stages.<name>` (Python sets argv[0] so while it imports this package)
    # Ctrl-C during the stage's imports (seconds: torch, pandas) waits for the stage's start, which then says
    # it was interrupted and exits 130 (stages/_common.py); not a traceback from inside an import
    from multitab.runtime.process import defer_ctrl_c_while_starting

    defer_ctrl_c_while_starting()
