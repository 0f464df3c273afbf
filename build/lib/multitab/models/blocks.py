"""Blocks shared by the transformer models (MultiTab-Net, SAINT, FT-Transformer, TabTransformer) and
reusable by the MLP family: fused self-attention with an optional additive mask and rotary positions,
the per-sample mixing layer of the authors' `rope` path, feed-forward networks, pre-norm layers, and
batched per-task MLP heads.

The layers compute what the authors' transformer layers compute (docs/deviations.md, section 3
and S3): pre-norm; x + dropout(Attn(LN(x))); then x + FFN(LN(x)) with FFN = Linear -> GELU ->
dropout -> Linear, one rate (their `ff_dropout`) at both dropout sites and the attention-weight
dropout (their `att_dropout`) inside the attention. TabTransformer's layer is the exception
(``TabTransformerLayer``: dropout on the residual path, none in the FFN).

Initialisation ("authors"): every Linear weight ~ N(0, 0.01^2), biases 0, except the fused q/k/v input
projection of a standard attention layer, which keeps PyTorch's nn.MultiheadAttention default
(Xavier-uniform weight, zero bias), as in their code (docs/deviations.md S4).
"rtdl": U(+-1/sqrt(fan_in)) weights and biases.

Plain PyTorch: the chunked CPU kernels (cpu_kernels.py) are swapped in by ``accelerate_cpu(model)``
(accelerate.py), which training calls on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multitab.models.tokenizer import Init, init_bias_, init_weight_

QKVInit = Literal["xavier", "normal"]


def init_linear_(linear: nn.Linear, init: Init) -> None:
    init_weight_(linear.weight, init, linear.in_features)
    if linear.bias is not None:
        init_bias_(linear.bias, init, linear.in_features)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2024) over the sequence axis (-2) of [..., L, d_head].

    The frequencies are a buffer; the authors' rotary module holds them as d_head / 2 parameters that
    never train, so their parameter counts are d_head / 2 higher per rotary layer (e.g. 58 on Higgs)."""

    inv_freq: Tensor

    def __init__(self, d_head: int, base: float = 10_000.0) -> None:
        super().__init__()
        if d_head % 2:
            raise ValueError(f"rotary positions need an even head width, got {d_head=}")
        inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        pos = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)  # (L, d_head / 2)
        # The angles and their cos / sin in float32, cast to x's dtype only afterwards: under bf16 autocast
        # q and k are bfloat16, and an angle rounded to bfloat16 (8-bit mantissa) is off by up to 0.25 rad at
        # position 127 and 4 rad at 2047 (the batch is the sequence). Float32 inputs compute what they did.
        emb = torch.cat((freqs, freqs), dim=-1)  # (L, d_head)
        return x * emb.cos().to(x.dtype) + rotate_half(x) * emb.sin().to(x.dtype)

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        return 3 * output.numel()  # two products and a sum per element


class SelfAttention(nn.Module):
    """Multi-head self-attention, eq. (1)-(4) of the MultiTab paper: x [B, L, d] -> [B, L, d].

    One fused q/k/v projection (same parameters as nn.MultiheadAttention: 4 d^2 + 4 d), fused
    scaled-dot-product attention, an optional additive mask [L, L] (0 = keep, -inf = block; rows are
    queries) and optional rotary positions on q and k. ``need_weights=True`` takes the explicit
    softmax path and also returns the attention weights [B, n_heads, L, L] (tests, inspection)."""

    def __init__(
        self,
        *,
        d: int,
        n_heads: int,
        dropout: float = 0.0,
        rotary: bool = False,
        init: Init = "authors",
        qkv_init: QKVInit = "xavier",
    ) -> None:
        super().__init__()
        if n_heads < 1 or d % n_heads:
            raise ValueError(f"{n_heads=} must be >= 1 and divide the token width {d=}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"attention {dropout=} must be in [0, 1)")
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.rotary = Rotary(d // n_heads) if rotary else None
        if init == "authors" and qkv_init == "xavier":
            nn.init.xavier_uniform_(self.qkv.weight)
            nn.init.zeros_(self.qkv.bias)
        else:
            init_linear_(self.qkv, init)
        init_linear_(self.out, init)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        b, length, d = x.shape
        p = self.dropout if self.training else 0.0
        q, k, v = self.qkv(x).view(b, length, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)  # (B, h, L, d_head)
        weights = None
        if need_weights:
            scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
            if mask is not None:
                scores = scores + mask
            weights = scores.softmax(dim=-1)
            y = F.dropout(weights, p) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        y = self.out(y.transpose(1, 2).reshape(b, length, d))
        return y if weights is None else (y, weights)

    def flops(self, inputs: tuple[Tensor, ...], output: Any) -> int:
        """MACs beyond the q/k/v and output Linear layers: scaling, scores, softmax, weighted sum."""
        b, length, d = inputs[0].shape
        return b * (length * d + 2 * length * length * d + self.n_heads * length * length)


class PerSampleMixing(nn.Module):
    """What the authors' `rope: true` inter-sample layer computes (docs/deviations.md P3): attention of
    each sample to itself alone, i.e. out(v(x)); x [B, d] -> [B, d]. Their rotary layer has no dropout of
    its own, and neither has this one. Their query/key projections get zero gradient and are left out
    here, so this layer has 2 d^2 + 2 d parameters, not 4 d^2 + 4 d."""

    def __init__(self, *, d: int, n_heads: int, init: Init = "authors") -> None:
        super().__init__()
        if n_heads < 1 or d % n_heads:
            raise ValueError(f"{n_heads=} must be >= 1 and divide the width {d=}")
        self.n_heads = n_heads
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        init_linear_(self.v, init)
        init_linear_(self.out, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.v(x))


class FeedForward(nn.Module):
    """Linear(d, d_hidden) -> activation -> dropout -> Linear(d_hidden, d).

    GELU (exact erf form, nn.GELU()) by default: the paper names no activation, and every FFN of the
    authors' transformers (MultiTab-Net, SAINT, FT-T, TabT) uses nn.GELU() (docs/deviations.md)."""

    def __init__(
        self, *, d: int, d_hidden: int, dropout: float = 0.0, activation: str = "gelu", init: Init = "authors"
    ) -> None:
        super().__init__()
        if d_hidden < 1:
            raise ValueError(f"{d_hidden=} must be >= 1")
        acts: dict[str, nn.Module] = {"gelu": nn.GELU(), "relu": nn.ReLU()}
        if activation not in acts:
            raise ValueError(f"{activation=} must be one of {sorted(acts)}")
        self.linear1 = nn.Linear(d, d_hidden)
        # Not in place: an in-place activation on the Linear output (a view of a 2-D product for 3-D
        # inputs) makes autograd copy the whole hidden layer back (CopySlices): measured 25 % slower.
        self.act = acts[activation]
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.linear2 = nn.Linear(d_hidden, d)
        self.dropout = dropout
        self.activation = activation
        init_linear_(self.linear1, init)
        init_linear_(self.linear2, init)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.drop(self.act(self.linear1(x))))


class TransformerLayer(nn.Module):
    """Pre-norm block as the authors' EncoderLayer: x + dropout(Attn(LN(x))), then x + FFN(LN(x)).
    x [B, L, d] -> [B, L, d]. ``attention_dropout`` acts on the attention weights; ``ffn_dropout``
    on the attention output (before the residual add) and inside the FFN (after the activation)."""

    def __init__(
        self,
        *,
        d: int,
        n_heads: int,
        ffn_d_hidden: int,
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        rotary: bool = False,
        init: Init = "authors",
        qkv_init: QKVInit = "xavier",
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d)
        self.attention = SelfAttention(
            d=d, n_heads=n_heads, dropout=attention_dropout, rotary=rotary, init=init, qkv_init=qkv_init
        )
        self.attention_output_dropout = nn.Dropout(ffn_dropout)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = FeedForward(d=d, d_hidden=ffn_d_hidden, dropout=ffn_dropout, init=init)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        y = self.attention(self.attention_norm(x), mask)
        x = x + self.attention_output_dropout(y)
        return x + self.ffn(self.ffn_norm(x))


class TabTransformerLayer(nn.Module):
    """The authors' TabTransformer block, whose dropout sits on the residual path:
    x1 = Attn(LN(x)) + dropout(x); out = FFN(LN(x1)) + dropout(x1), FFN = Linear -> GELU -> Linear
    (no inner dropout). ``attention_dropout`` acts on the attention weights; ``residual_dropout`` is
    their `ff_dropout` (two independent dropout draws). x [B, L, d] -> [B, L, d]."""

    def __init__(
        self,
        *,
        d: int,
        n_heads: int,
        ffn_d_hidden: int,
        attention_dropout: float = 0.0,
        residual_dropout: float = 0.0,
        init: Init = "authors",
    ) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(d)
        self.attention = SelfAttention(d=d, n_heads=n_heads, dropout=attention_dropout, init=init)
        self.residual_dropout = nn.Dropout(residual_dropout)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = FeedForward(d=d, d_hidden=ffn_d_hidden, dropout=0.0, init=init)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = self.attention(self.attention_norm(x), mask) + self.residual_dropout(x)  # type: ignore[operator]
        return self.ffn(self.ffn_norm(x)) + self.residual_dropout(x)


class MixingLayer(nn.Module):
    """Pre-norm block around PerSampleMixing, as the authors' `rope: true` inter-sample EncoderLayer:
    x + dropout(Mix(LN(x))), then x + FFN(LN(x)). x [B, d]. ``attention_dropout`` is accepted for a
    uniform signature and has no site here (their rotary layer has no attention dropout)."""

    def __init__(
        self,
        *,
        d: int,
        n_heads: int,
        ffn_d_hidden: int,
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        init: Init = "authors",
    ) -> None:
        super().__init__()
        del attention_dropout  # no attention weights to drop: each sample attends to itself alone
        self.attention_norm = nn.LayerNorm(d)
        self.attention = PerSampleMixing(d=d, n_heads=n_heads, init=init)
        self.attention_output_dropout = nn.Dropout(ffn_dropout)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = FeedForward(d=d, d_hidden=ffn_d_hidden, dropout=ffn_dropout, init=init)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention_output_dropout(self.attention(self.attention_norm(x)))
        return x + self.ffn(self.ffn_norm(x))


class TaskHeads(nn.Module):
    """One MLP per task, all evaluated in batched ops (no loop over tasks).

    x [B, n_tasks, d_in] (task i reads x[:, i]) -> [B, sum(d_out)]; task i owns output columns
    ``slices[i]``. Per task: Linear(d_in, h1) -> ReLU -> dropout -> ... -> Linear(h_last, d_out_i),
    the same parameters as n_tasks separate nn.Sequential heads."""

    out_task: Tensor

    def __init__(
        self,
        *,
        d_in: int,
        d_hidden: Sequence[int],
        d_out: Sequence[int],
        dropout: float = 0.0,
        init: Init = "authors",
    ) -> None:
        super().__init__()
        if not d_out or min(d_out) < 1:
            raise ValueError(f"{d_out=} must list at least one task, each with >= 1 output")
        if any(h < 1 for h in d_hidden):
            raise ValueError(f"{d_hidden=} must be widths >= 1")
        t = len(d_out)
        dims = [d_in, *d_hidden]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(t, a, b)) for a, b in zip(dims, dims[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(t, b)) for b in dims[1:])
        self.out_weight = nn.Parameter(torch.empty(sum(d_out), dims[-1]))
        self.out_bias = nn.Parameter(torch.empty(sum(d_out)))
        self.register_buffer(
            "out_task", torch.repeat_interleave(torch.arange(t), torch.tensor(list(d_out))), persistent=False
        )
        self.dropout = nn.Dropout(dropout)
        for w, bias in zip(self.weights, self.biases):
            init_weight_(w, init, w.shape[1])
            init_bias_(bias, init, w.shape[1])
        init_weight_(self.out_weight, init, dims[-1])
        init_bias_(self.out_bias, init, dims[-1])
        starts = torch.tensor([0, *d_out]).cumsum(0).tolist()
        self.slices = [slice(a, b) for a, b in zip(starts, starts[1:])]

    def forward(self, x: Tensor) -> Tensor:
        for w, bias in zip(self.weights, self.biases):
            x = self.dropout(torch.relu(torch.einsum("btd,tdh->bth", x, w) + bias))  # (B, t, h)
        # each output unit reads its own task's last hidden layer: (B, sum(d_out))
        return (x[:, self.out_task] * self.out_weight).sum(-1) + self.out_bias

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        """MACs as ptflops counts n_tasks separate Linear -> ReLU heads (bias once per unit)."""
        b = inputs[0].shape[0]
        macs = 0
        for w in self.weights:
            t, d_in, d_h = w.shape
            macs += b * t * d_in * d_h + t * d_h + b * t * d_h
        return macs + b * self.out_weight.numel() + self.out_weight.shape[0]
