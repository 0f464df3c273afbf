"""CPU training paths for the small-token layers of the tabular transformers.

At the paper's sizes a transformer layer over feature tokens works on tiny matrices (Higgs: 29 tokens
of width 16, 4 heads of width 4) and a huge row count (batch 2048 x 29 tokens = 59,392 rows). On a CPU
the time then goes to memory traffic, not arithmetic: the feed-forward hidden layer (59,392 x 256
floats, 61 MB) is written and re-read about ten times per step by separate ops (Linear, GELU, dropout,
their backward ops), and PyTorch's CPU flash attention is tuned for head widths of 64 and up. Measured
with torch.profiler at the Higgs selected configuration (2 threads, batch 2048): the token FFN took
42 % of a training step and fused attention 24 %.

The two autograd functions below compute exactly what the reference ops compute (same parameters,
same results up to float summation order), in row chunks small enough to stay in cache, with
dropout applied in place and the backward pass written out by hand:

- ``feed_forward``: Linear -> GELU (exact erf form, as nn.GELU() and the authors' FFNs) or ReLU ->
  dropout -> Linear. For GELU only the pre-activation (and, with dropout, a bool keep mask) is kept for
  backward, the activation is recomputed per chunk; for ReLU only the post-dropout hidden layer is
  kept (its sign is the ReLU-and-dropout mask).
- ``small_head_attention``: multi-head self-attention from the fused q/k/v projection output, with an
  additive mask, as batched matrix products; scores and weights of a chunk never leave the cache.

The model files call the reference ops only; ``accelerate_cpu(model)`` (accelerate.py) swaps in the
modules that call these kernels, and training does so on CPU. Even then they run only on float32 CPU
tensors outside autocast (``use_cpu_kernels``); on CUDA the reference ops are better and are what
torch.compile fuses. ``benchmarks/model_throughput.py`` measures the gain.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

# Rows per chunk: the hidden chunk (rows x d_hidden floats) should fit in a core's L2 cache.
_CHUNK_BYTES = 1 << 20


def use_cpu_kernels(x: Tensor) -> bool:
    """The chunked paths run for float32 CPU tensors outside autocast and tracing."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
    )


def uses_small_head_kernel(n_heads: int, length: int) -> bool:
    """Whether ``small_head_attention`` suits a sequence: one sample's scores (n_heads x L x L floats)
    fit the chunk budget. Longer sequences (inter-sample attention over a batch) go to PyTorch's
    flash attention, which never holds the whole score matrix."""
    return 4 * n_heads * length * length <= _CHUNK_BYTES


def _chunk_rows(width: int, minimum: int = 256) -> int:
    return max(minimum, _CHUNK_BYTES // (4 * max(width, 1)))


ACTIVATIONS: tuple[str, ...] = ("gelu", "relu")


def _activate(z: Tensor, activation: str) -> Tensor:
    """GELU (exact, erf form: nn.GELU's default) into a new chunk buffer, or ReLU in place."""
    return F.gelu(z) if activation == "gelu" else z.relu_()


def _feed_forward_chunks(
    x: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    dropout: float,
    activation: str,
    *,
    keep_hidden: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """-> (output, kept hidden layer, kept dropout mask or None).

    The kept hidden layer holds, for all rows if keep_hidden (else the last chunk only), what backward
    needs: the pre-activation for GELU, the post-ReLU-and-dropout values for ReLU (their sign is the
    mask). For GELU with dropout the keep mask (bool) is kept as well."""
    n = x.shape[0]
    step = _chunk_rows(w1.shape[0])
    hidden = x.new_empty(n if keep_hidden else min(n, step), w1.shape[0])  # (rows, d_hidden)
    keep_all = None
    if keep_hidden and dropout > 0.0 and activation == "gelu":
        keep_all = torch.empty(hidden.shape, dtype=torch.bool)
    y = x.new_empty(n, w2.shape[0])
    for s in range(0, n, step):
        rows = min(step, n - s)
        z = torch.addmm(
            b1, x[s : s + rows], w1.t(), out=hidden[s : s + rows] if keep_hidden else hidden[:rows]
        )
        h = _activate(z, activation)
        if dropout > 0.0:
            keep = torch.empty_like(h).bernoulli_(1.0 - dropout)
            h.mul_(keep).div_(1.0 - dropout)
            if keep_all is not None:
                keep_all[s : s + rows] = keep.bool()
        torch.addmm(b2, h, w2.t(), out=y[s : s + rows])
    return y, hidden, keep_all


class _FeedForward(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, dropout: float, activation: str
    ) -> Tensor:
        y, hidden, keep = _feed_forward_chunks(x, w1, b1, w2, b2, dropout, activation, keep_hidden=True)
        ctx.save_for_backward(x, w1, w2, hidden, keep)
        ctx.dropout, ctx.activation = dropout, activation
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, w1, w2, hidden, keep_all = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        n = x.shape[0]
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        grad_w1, grad_b1 = torch.zeros_like(w1), w1.new_zeros(w1.shape[0])
        grad_w2 = torch.zeros_like(w2)
        grad_b2 = grad_y.sum(0)
        scale = 1.0 / (1.0 - ctx.dropout)
        gelu = ctx.activation == "gelu"
        step = _chunk_rows(w1.shape[0])
        for s in range(0, n, step):
            gy, z = grad_y[s : s + step], hidden[s : s + step]
            gh = gy @ w2  # (chunk, d_hidden)
            if gelu:  # z is the pre-activation: recompute the hidden chunk (in cache)
                h = F.gelu(z)
                gh = torch.ops.aten.gelu_backward(gh, z)
                if keep_all is not None:
                    keep = keep_all[s : s + step]
                    h.mul_(keep).mul_(scale)
                    gh.mul_(keep).mul_(scale)
                grad_w2.addmm_(gy.t(), h)
            else:  # z holds the hidden layer after ReLU and dropout: > 0 exactly where both passed
                grad_w2.addmm_(gy.t(), z)
                torch.ops.aten.threshold_backward.grad_input(gh, z, 0.0, grad_input=gh)  # one pass, in place
                if ctx.dropout > 0.0:
                    gh.mul_(scale)
            grad_b1.add_(gh.sum(0))
            grad_w1.addmm_(gh.t(), x[s : s + step])
            if grad_x is not None:
                torch.mm(gh, w1, out=grad_x[s : s + step])
        return grad_x, grad_w1, grad_b1, grad_w2, grad_b2, None, None


def feed_forward(
    x: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    dropout: float = 0.0,
    activation: str = "gelu",
) -> Tensor:
    """Linear(w1, b1) -> activation -> dropout(p) -> Linear(w2, b2) on x [..., d]; activation "gelu"
    (exact erf GELU, nn.GELU()) or "relu"; dropout only if p > 0 (pass 0 in evaluation)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"{activation=} must be one of {ACTIVATIONS}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w1, b1, w2, b2)):
        y = _FeedForward.apply(x2, w1, b1, w2, b2, float(dropout), activation)
    else:  # inference: one chunk-sized hidden buffer, nothing kept
        y, _, _ = _feed_forward_chunks(x2, w1, b1, w2, b2, float(dropout), activation, keep_hidden=False)
    return y.view(*lead, w2.shape[0])


def _heads(qkv: Tensor, n_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """qkv [b, L, 3 d] -> q, k, v each [b * h, L, d_head] (contiguous)."""
    b, length, d3 = qkv.shape
    d_head = d3 // (3 * n_heads)
    parts = (
        qkv.view(b, length, 3, n_heads, d_head).permute(2, 0, 3, 1, 4).reshape(3, b * n_heads, length, d_head)
    )
    return parts[0], parts[1], parts[2]


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, qkv: Tensor, mask: Tensor | None, n_heads: int, dropout: float
    ) -> Tensor:
        b, length, d3 = qkv.shape
        d, d_head = d3 // 3, d3 // (3 * n_heads)
        scale = d_head**-0.5
        out = qkv.new_empty(b, length, d)
        step = _chunk_rows(n_heads * length * length, minimum=1)
        weights = []
        for s in range(0, b, step):
            q, k, v = _heads(qkv[s : s + step], n_heads)
            if mask is None:
                scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale)
            else:
                scores = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=scale)
            a = scores.softmax(-1)  # (c * h, L, L)
            keep = None
            if dropout > 0.0:  # the dropout mask, scaled by 1 / (1 - p)
                keep = torch.empty_like(a).bernoulli_(1.0 - dropout).div_(1.0 - dropout)
            weights.append((a, keep))
            y = torch.bmm(a if keep is None else a * keep, v)  # (c * h, L, d_head)
            c = q.shape[0] // n_heads
            out[s : s + step] = y.view(c, n_heads, length, d_head).transpose(1, 2).reshape(c, length, d)
        ctx.save_for_backward(qkv)
        ctx.weights = weights
        ctx.n_heads, ctx.step, ctx.scale = n_heads, step, scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        (qkv,) = ctx.saved_tensors
        n_heads, step, scale = ctx.n_heads, ctx.step, ctx.scale
        b, length, d3 = qkv.shape
        d_head = d3 // (3 * n_heads)
        grad_qkv = torch.empty_like(qkv)
        for i, s in enumerate(range(0, b, step)):
            q, k, v = _heads(qkv[s : s + step], n_heads)
            a, keep = ctx.weights[i]
            c = q.shape[0] // n_heads
            gy = (
                grad_out[s : s + step]
                .reshape(c, length, n_heads, d_head)
                .transpose(1, 2)
                .reshape(-1, length, d_head)
            )
            grad_v = torch.bmm((a if keep is None else a * keep).transpose(1, 2), gy)
            grad_a = torch.bmm(gy, v.transpose(1, 2))
            if keep is not None:
                grad_a.mul_(keep)
            # softmax backward: a * (grad_a - sum(grad_a * a))
            grad_s = grad_a.sub_((grad_a * a).sum(-1, keepdim=True)).mul_(a).mul_(scale)
            grad_q = torch.bmm(grad_s, k)
            grad_k = torch.bmm(grad_s.transpose(1, 2), q)
            g = torch.stack((grad_q, grad_k, grad_v))  # (3, c * h, L, d_head)
            grad_qkv[s : s + step] = (
                g.view(3, c, n_heads, length, d_head).permute(1, 3, 0, 2, 4).reshape(c, length, d3)
            )
        return grad_qkv, None, None, None


def small_head_attention(qkv: Tensor, mask: Tensor | None, n_heads: int, dropout: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d_head) + mask) v per head, from qkv [B, L, 3 d] (q, k, v blocks, heads
    contiguous within each, as nn.MultiheadAttention's fused projection) -> [B, L, d], heads
    concatenated. ``mask`` [L, L] is additive (0 keep, -inf block). Dropout on the weights if p > 0."""
    return _Attention.apply(qkv.contiguous(), mask, int(n_heads), float(dropout))
