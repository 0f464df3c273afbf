"""Shared test settings: offline, quiet, single-threaded torch (the machine has two cores)."""

import os

for _k, _v in {
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "DVC_NO_UPDATER": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}.items():
    os.environ.setdefault(_k, _v)
