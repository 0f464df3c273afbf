"""Thin command-line entry points, one per DVC stage (paths come from dvc.yaml)."""

import sys

if sys.argv[:1] == ["-m"]:  # `python -m stages.<name>` (Python sets argv[0] so while it imports this package)
    import os

    # Under `make repro` a warm process of the flow's stage server runs the stage (multitab.runtime.stage_server:
    # no import of torch, pandas or Great Expectations here); with interpreter options, or without a server, the
    # stage runs in this process as below.
    if os.environ.get("MULTITAB_STAGE_SERVER") and sys.orig_argv[1:2] == ["-m"]:
        from multitab.runtime.warm_command import finish, forward

        code = forward(sys.orig_argv[2], sys.orig_argv[3:])
        if code is not None:
            finish(code)
    # Ctrl-C during the stage's imports (seconds: torch, pandas) waits for the stage's start, which then says
    # it was interrupted and exits 130 (stages/_common.py); not a traceback from inside an import
    from multitab.runtime.process import defer_ctrl_c_while_starting

    defer_ctrl_c_while_starting()
