"""Shared test settings: offline, quiet, single-threaded torch (the machine has two cores)."""

import os

import pytest

for _k, _v in {
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "DVC_NO_UPDATER": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}.items():
    os.environ.setdefault(_k, _v)


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
