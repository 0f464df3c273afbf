"""Where and how a run computes: the device, seeding and determinism, mixed precision."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from multitab.runtime.cpu import tune_cpu_runtime


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        # ValueError: the same on every try on this machine (the stage exits with BAD_INPUT, not retried)
        raise ValueError("train.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and torch. `deterministic`: deterministic kernels, strictly on CPU (bit-identical
    reruns and resumes); on CUDA as far as kernels allow (warnings, not errors, for ops without a
    deterministic implementation: compute_mode.computing records them in the run's metrics.json and runs the
    attention on the math kernel; cuBLAS gets the workspace setting it needs)."""
    import os
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cuda = torch.cuda.is_available()
    if deterministic and cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # torch.use_deterministic_algorithms also sets torch.compile's flag, and importing the compiler to do so costs
    # 1.3 s per run: the kernels' flag here, the compiler's where a run compiles (compiler_determinism)
    torch._C._set_deterministic_algorithms(deterministic, warn_only=cuda)
    tune_cpu_runtime()  # flush denormals, keep freed memory (multitab/runtime.py)
    if cuda:
        torch.backends.cudnn.benchmark = not deterministic


def compiler_determinism() -> None:
    """Give torch.compile the determinism seed_everything set for the kernels (torch.use_deterministic_algorithms
    sets both; seed_everything, to spare every run the compiler's import, only the kernels')."""
    torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled(),
                                       warn_only=torch.is_deterministic_algorithms_warn_only_enabled())


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """bf16: autocast on CUDA and on CPU (opt-in; on CPU the chunked fp32 kernels step aside and the
    reference ops run in bfloat16, see benchmarks/model_throughput.py --bench-shapes). tf32 is no autocast:
    fp32 tensors, TF32 matrix products for the whole run (compute_mode.tf32)."""
    if precision == "bf16" and device.type in ("cuda", "cpu"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
