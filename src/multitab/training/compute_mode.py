"""How a run computes, as it actually ran: TF32 (`train.precision: tf32`), deterministic kernels
(`train.deterministic`), and the record of both that goes into the run's metrics.json.

    with computing(device, precision, deterministic) as mode:
        ... train ...
    record |= mode.record()   # precision requested / effective, deterministic as it ran, the ops that were not

TF32 is a CUDA feature (cuBLAS matrix products, cuDNN convolutions with a 10-bit mantissa on their inputs and
fp32 accumulation); on CPU `tf32` trains in fp32 and the record says so. The previous TF32 settings come back
after the run, so that a process training several runs (a benchmark, the tests) carries nothing over.

Determinism on CUDA: torch warns rather than fails for an op without a deterministic kernel
(`use_deterministic_algorithms(True, warn_only=True)`, device.py), so the warnings are caught here and the run
records `deterministic: false` with the ops' names. The inter-sample attention's backward would be one of them
(the memory-efficient and flash SDPA kernels accumulate in a non-deterministic order, and torch warns about the
memory-efficient one only once per process), so a deterministic CUDA run computes attention with the math
kernel. On CPU every kernel torch offers is deterministic or raises (warn_only=False), and nothing here changes
a CPU run's numbers.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

PRECISIONS = ("fp32", "tf32", "bf16")

# What torch's warnings about a non-deterministic op say (ATen's alertNotDeterministic, the SDPA kernel
# choice, cuBLAS without CUBLAS_WORKSPACE_CONFIG).
_OP = re.compile(r"^\s*(?P<op>\S+) does not have a deterministic implementation")
_OTHER = re.compile(r"non-deterministic|not deterministic|CUBLAS_WORKSPACE_CONFIG")


def nondeterministic_op(message: str) -> str | None:
    """The op a torch warning says has no deterministic kernel, or None when the warning is about something
    else. An op name where torch gives one, else the warning's first sentence."""
    found = _OP.match(message)
    if found:
        return found.group("op")
    if _OTHER.search(message):
        return message.split(". ")[0].strip()[:120]
    return None


def effective_precision(device: torch.device, precision: str) -> str:
    """What a run trains in: tf32 only on CUDA (fp32 elsewhere); fp32 and bf16 as asked."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    return "fp32" if precision == "tf32" and device.type != "cuda" else precision


@contextmanager
def tf32(device: torch.device, precision: str) -> Iterator[None]:
    """TF32 matrix products and convolutions while the block runs, when `precision` is tf32 on CUDA; the
    previous settings afterwards. The per-backend switches (`torch.backends.cuda.matmul.allow_tf32`,
    `torch.backends.cudnn.allow_tf32`) rather than `set_float32_matmul_precision`, which would also reach
    oneDNN's CPU matmuls, or the `fp32_precision` properties, which torch refuses to mix with the former."""
    if effective_precision(device, precision) != "tf32":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


@dataclass
class ComputeMode:
    """What `computing` saw: the settings asked for and the non-deterministic ops torch warned about."""

    precision: str
    effective: str
    deterministic: bool
    ops: list[str] = field(default_factory=list)

    def note(self, message: str) -> bool:
        """Record `message` when it is torch's warning about a non-deterministic op; whether it was."""
        op = nondeterministic_op(message)
        if op is not None and op not in self.ops:
            self.ops.append(op)
        return op is not None

    def record(self) -> dict[str, Any]:
        """The metrics record's keys: `deterministic` true only when asked for and no op warned."""
        return {"precision_requested": self.precision, "precision_effective": self.effective,
                "deterministic": self.deterministic and not self.ops, "nondeterministic_ops": list(self.ops)}


@contextmanager
def computing(device: torch.device, precision: str, deterministic: bool) -> Iterator[ComputeMode]:
    """Run the block as `precision` and `deterministic` ask on `device` (TF32 on CUDA; on CUDA with
    `deterministic`, the math SDPA kernel) and record how it ran. Warnings torch raises about
    non-deterministic ops are recorded, not shown; every other warning is passed on when the block ends."""
    mode = ComputeMode(precision, effective_precision(device, precision), deterministic)
    others: list[warnings.WarningMessage] = []
    try:
        with ExitStack() as stack:
            stack.enter_context(tf32(device, precision))
            if deterministic and device.type == "cuda":
                stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")  # a repeated warning of a later run in the same process still counts
            try:
                yield mode
            finally:
                others = [w for w in caught if not mode.note(str(w.message))]
    finally:
        for w in others:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
