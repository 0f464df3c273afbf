"""Prefect flows over the DVC DAG (dvc.yaml stays the only DAG; these modules only run its stages).

Importing this package sets offline defaults before Prefect is imported anywhere: no telemetry, no
update checks, and a project-local PREFECT_HOME (git-ignored `.prefect/`) so ephemeral runs keep their
history beside the checkout instead of in ~/.prefect. Values already in the environment win.

Run as `python -m flows.pipeline` (`make repro`), Ctrl-C while it is still importing and reading the DAG
(NumPy, DVC, Prefect: seconds) is acted on by its `main` between those steps: one line and exit 130,
instead of a traceback from inside an import.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Python sets argv[0] to "-m" while it imports the package of a `-m` module
if sys.argv[:1] == ["-m"] and sys.orig_argv[sys.orig_argv.index("-m") + 1:][:1] == ["flows.pipeline"]:
    from multitab.runtime.process import defer_ctrl_c_while_starting

    defer_ctrl_c_while_starting()

_OFFLINE_DEFAULTS = {
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "DVC_NO_UPDATER": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
    "PREFECT_HOME": str(Path(__file__).resolve().parent.parent / ".prefect"),
    # The ephemeral server's first start migrates a fresh SQLite database: slow on a busy laptop.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    # Longer than the server's SQLite busy timeout (60 s; tests/test_pipeline.py checks it). Prefect's client retries
    # a request that timed out; at its default (60 s, as long as the busy timeout) a GPU slot's acquisition that
    # waited on the database for a minute was granted the moment the client gave up, and the retry found the slot
    # taken by that lost grant: the stage waited for it forever (an ephemeral server never reclaims a lease).
    "PREFECT_API_REQUEST_TIMEOUT": "300",
}
for _key, _value in _OFFLINE_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
