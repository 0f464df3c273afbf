"""A stage's peak resident memory, logged each time it grows by another step.

The kernel ends a process that runs the machine out of memory with SIGKILL, which no handler sees: the stage
cannot say why it stopped. Its last line of this kind is then what the flow reports as its peak
(flows/dvc_output.py reads `PEAK_LINE`). Small stages stay below the first step and log nothing.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

PEAK_LINE = re.compile(r"peak resident memory (\d+(?:\.\d+)?) GB")
_STATUS = Path("/proc/self/status")


def peak_gb() -> float | None:
    """This process's peak resident memory (VmHWM), or None where /proc does not say."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        return None
    return None


_started = threading.Event()


def watch_memory(step_gb: float = 1.0, interval_seconds: float = 1.0) -> None:
    """Log `peak resident memory <x> GB` from a daemon thread whenever the peak passes another `step_gb`
    (one thread per process, however often it is called)."""
    if _started.is_set() or peak_gb() is None:
        return
    _started.set()

    def watch() -> None:
        logged = 0.0
        while True:
            peak = peak_gb() or 0.0
            if peak >= logged + step_gb:
                logged = peak
                log.info("peak resident memory %.1f GB", peak)
            time.sleep(interval_seconds)

    threading.Thread(target=watch, name="memwatch", daemon=True).start()
