"""Shared test settings: offline, quiet, single-threaded torch (the machine has two cores), and none of the
user's state read or written.

Every place a tool keeps state outside the project (Prefect's home and database, which flows/ would otherwise
put in the checkout's .prefect/; DVC's global and system config and its site cache under /var/tmp/dvc; the
XDG config, cache, data and state folders that matplotlib, torch and the rest use; the inductor cache) is a
folder of this test process's own temporary directory, removed when it exits; settings that point Prefect
at the user's server, profile or database are dropped. Each pytest-xdist worker loads this file, and every
subprocess a test starts inherits it. tests/test_user_state.py checks it."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

for _k, _v in {
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "DVC_NO_UPDATER": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}.items():
    os.environ.setdefault(_k, _v)
# flows/__init__.py's defaults (Prefect's client request timeout among them) before any test imports Prefect, whose
# settings are read when it is imported; PREFECT_HOME, which it also defaults, is set to this process's below
import flows  # noqa: E402,F401

STATE = Path(tempfile.mkdtemp(prefix="multitab-tests-state-"))
atexit.register(shutil.rmtree, STATE, ignore_errors=True)
STATE_DIRS = {
    "PREFECT_HOME": "prefect",
    "DVC_GLOBAL_CONFIG_DIR": "dvc/global",
    "DVC_SYSTEM_CONFIG_DIR": "dvc/system",
    "DVC_SITE_CACHE_DIR": "dvc/site",
    "XDG_CONFIG_HOME": "xdg/config",
    "XDG_CACHE_HOME": "xdg/cache",
    "XDG_DATA_HOME": "xdg/data",
    "XDG_STATE_HOME": "xdg/state",
    "MPLCONFIGDIR": "matplotlib",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
}
for _k, _rel in STATE_DIRS.items():
    os.environ[_k] = str(STATE / _rel)
# the user's Prefect server, login, profile, database and storage
for _k in ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_API_AUTH_STRING", "PREFECT_PROFILE",
           "PREFECT_PROFILES_PATH", "PREFECT_API_DATABASE_CONNECTION_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL",
           "PREFECT_LOCAL_STORAGE_PATH", "PREFECT_RESULTS_LOCAL_STORAGE_PATH", "PREFECT_SERVER_API_AUTH_STRING",
           "PREFECT_UI_API_URL"):
    os.environ.pop(_k, None)


@pytest.fixture(autouse=True)
def _default_float_mode():
    """Training flushes denormals process-wide (multitab.runtime.tune_cpu_runtime, for speed); that CPU flag
    also changes numpy's arithmetic on tiny numbers, so a test that trains in-process would change the
    results of tests that run after it. Each test starts from the default mode."""
    import torch

    torch.set_flush_denormal(False)
    yield
    torch.set_flush_denormal(False)


@pytest.fixture
def one_torch_thread():
    """Tiny models: one torch thread is fastest on a shared two-core machine (the in-context model tests)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
