"""Process-wide CPU settings for training and the throughput benchmarks.

- Denormal floats flushed to zero: Adam's second moments of N(0, 0.01^2)-initialised weights reach
  denormals, which x86 CPUs process far slower (results stay deterministic).
- glibc malloc keeps freed memory: by default every allocation above 128 KB (up to 32 MB, adaptively)
  is a fresh mmap, so each training step page-faults its activations in again (the kernel zeroes every
  page). Measured with torch.profiler at the Higgs MultiTab-Net configuration: a 29 x 29 score batch
  took 370 us to compute into a new tensor and 49 us into a reused one, and the whole step ran 1.3x
  faster with the setting below. PyTorch's CUDA allocator caches blocks the same way; on CPU it relies
  on malloc. Serving everything from the heap and never trimming it means the process keeps its peak
  memory until it exits, which suits a training run (one per stage). No effect off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

import torch

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc malloc to serve all allocations from the heap and not give freed memory back to the
    OS. Returns whether the settings took effect (False off Linux/glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    if not ok:
        log.debug("mallopt refused the allocator settings; keeping the defaults")
    return ok


def tune_cpu_runtime() -> None:
    """Flush denormals and keep freed memory (see the module docstring). Idempotent."""
    torch.set_flush_denormal(True)
    keep_freed_memory()
