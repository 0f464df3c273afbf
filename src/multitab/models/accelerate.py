"""``accelerate_cpu(model)``: swap the chunked CPU kernels (cpu_kernels.py) into a model built from the
plain PyTorch blocks (blocks.py).

Every ``FeedForward`` and ``SelfAttention`` module of the model becomes its fast subclass in place: the
same object, parameters, buffers, hooks and state_dict keys, only ``forward`` differs. So checkpoints are
interchangeable between a model and its accelerated self, and both compute the same function (up to
float summation order; tests/test_cpu_kernels.py). The fast forward takes the kernels only where they
apply (float32 CPU tensors outside autocast and tracing; attention: short sequences, no rotary positions,
no returned weights) and the reference ops otherwise, so an accelerated model still runs anywhere. Under
CPU bf16 autocast (train.precision bf16, opt-in) the feed-forward runs the reference ops in bf16, and the
attention over feature tokens runs in float32 through the kernel (faster than bf16 flash attention with
tiny heads; benchmarks/model_throughput.py --bench-shapes); float32 training is unaffected.

Training calls it when the device is the CPU (training/loop.py); FLOP counting (models/counting.py)
does not, so its per-module hooks see every Linear layer called.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multitab.models.blocks import FeedForward, SelfAttention
from multitab.models.cpu_kernels import (
    feed_forward,
    small_head_attention,
    use_cpu_kernels,
    uses_small_head_kernel,
)


def _cpu_autocast(x: Tensor) -> bool:
    return x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()


class CPUFeedForward(FeedForward):
    """FeedForward whose CPU float32 forward is the chunked kernel (`cpu_kernels.feed_forward`)."""

    def forward(self, x: Tensor) -> Tensor:
        if not use_cpu_kernels(x):
            return super().forward(x)
        p = self.dropout if self.training else 0.0
        l1, l2 = self.linear1, self.linear2
        return feed_forward(x, l1.weight, l1.bias, l2.weight, l2.bias, p, self.activation)


class CPUSelfAttention(SelfAttention):
    """SelfAttention whose CPU float32 forward over short sequences is `cpu_kernels.small_head_attention`."""

    def forward(
        self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        small = uses_small_head_kernel(self.n_heads, x.shape[1])
        if _cpu_autocast(x) and small and not need_weights and self.rotary is None:
            # bf16 autocast: PyTorch's CPU flash attention in bf16 is slow for tiny heads, so the whole
            # layer takes the float32 kernel. MultiTab-Net at the bench shapes, 1 thread: bf16 trained at
            # 0.7x its fp32 rate without this, 1.8x with it (results/benchmarks/bench_shapes_cpu.json).
            with torch.autocast("cpu", enabled=False):
                return self.forward(x.float(), None if mask is None else mask.float())
        if need_weights or self.rotary is not None or not small or not use_cpu_kernels(x):
            return super().forward(x, mask, need_weights)
        p = self.dropout if self.training else 0.0
        return self.out(small_head_attention(self.qkv(x), mask, self.n_heads, p))


_FAST: dict[type[nn.Module], type[nn.Module]] = {FeedForward: CPUFeedForward, SelfAttention: CPUSelfAttention}


def accelerate_cpu(model: nn.Module) -> nn.Module:
    """Swap the CPU kernels into `model` in place (see the module docstring) and return it. Idempotent;
    modules of other types, and subclasses of the blocks, are left as they are."""
    for module in model.modules():
        fast = _FAST.get(type(module))
        if fast is not None:
            module.__class__ = fast
    return model


ACCELERATED: tuple[type[nn.Module], ...] = tuple(_FAST.values())
