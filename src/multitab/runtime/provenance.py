"""Where a result was made: the git commit and the machine (records under results/), and the Prefect flow run."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

_CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; platform.processor() elsewhere, may be empty)."""
    if _CPUINFO.exists():
        for line in _CPUINFO.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def machine() -> str:
    """`Intel(R) Xeon(R) Processor, 2 CPUs, Linux`."""
    return f"{cpu_model() or platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}"


def git_commit(cwd: str | Path) -> str:
    """HEAD of the repository around `cwd`; outside one (a working tree copied without its history, as to a
    lent GPU machine) $MULTITAB_COMMIT, else "unknown"."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=cwd).stdout.strip()
    except OSError:  # no git on the machine
        head = ""
    return head or os.environ.get("MULTITAB_COMMIT") or "unknown"


# The name of the Prefect flow run that runs the stages (flows.provenance sets it in the flow's environment,
# which its `dvc repro` subprocesses inherit): the entry page names the run whose logs and artifacts hold it.
FLOW_RUN_ENV = "MULTITAB_FLOW_RUN"


def flow_run_name() -> str | None:
    """The Prefect flow run this process runs under (None: outside flows.pipeline, e.g. plain `dvc repro`)."""
    return os.environ.get(FLOW_RUN_ENV) or None
