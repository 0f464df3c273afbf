"""Orion-MSP's blocks (multitab.icl.orion_msp assembles them into the model): the attention block and
encoder with rotary positions, TabICL's column embedder (a set transformer with inducing points per column,
§3.3), the multi-scale row encoder with its block-sparse mask (§3.4), the Perceiver memory (§3.5) and the
ICL predictor (§3.6). Module and parameter names follow the released checkpoint's state dict; the switches
(`window`, `memory`, `links`) and the provenance of each block are described in multitab.icl.orion_msp.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SKIP_VALUE = -100.0  # the reference's marker for cells its linear layers skip (SkippableLinear)


# ----------------------------------------------------------------------------------------- attention
class _Rotary(nn.Module):
    """Rotary position embedding over interleaved pairs of a head's channels (positions 0..L-1)."""

    def __init__(self, d_head: int, base: float) -> None:
        super().__init__()
        freqs = 1.0 / (base ** (torch.arange(0, d_head, 2)[: d_head // 2].float() / d_head))
        # a (frozen) parameter, as in the checkpoint: `...rope.freqs`
        self.freqs = nn.Parameter(freqs, requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:  # x: (..., L, d_head)
        position = torch.arange(x.shape[-2], device=x.device, dtype=x.dtype)
        angle = (position.to(self.freqs.dtype)[:, None] * self.freqs).repeat_interleave(2, dim=-1)  # (L, d_head)
        pairs = x.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return (x * angle.cos() + rotated * angle.sin()).to(x.dtype)


def _attend(
    attn: nn.MultiheadAttention, q: Tensor, kv: Tensor, *, mask: Tensor | None = None,
    n_keys: int | None = None, rope: _Rotary | None = None,
) -> Tensor:
    """Multi-head attention of `q` (..., Lq, d) over `kv` (..., Lk, d) with `attn`'s weights.
    `mask` (Lq, Lk) bool, True = may attend; `n_keys`: only the first n_keys keys (the split mask)."""
    d, n_heads = q.shape[-1], attn.num_heads
    w, b = attn.in_proj_weight, attn.in_proj_bias
    assert b is not None
    query = F.linear(q, w[:d], b[:d])
    key, value = F.linear(kv, w[d:], b[d:]).chunk(2, dim=-1)
    query, key, value = (t.unflatten(-1, (n_heads, -1)).transpose(-3, -2) for t in (query, key, value))
    if rope is not None:  # positions are token indices of the row (§3.4.5)
        query, key = rope(query), rope(key)
    if n_keys is not None:
        key, value = key[..., :n_keys, :], value[..., :n_keys, :]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)  # (..., n_heads, Lq, d_head)
    return attn.out_proj(out.transpose(-3, -2).flatten(-2))


class Block(nn.Module):
    """Pre-norm attention + feed-forward block; keys and values go through `norm1` as the queries do."""

    def __init__(self, d: int, n_heads: int, d_hidden: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d, d_hidden), nn.Linear(d_hidden, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, q: Tensor, kv: Tensor | None = None, **attend: object) -> Tensor:
        kv = q if kv is None else kv
        x = q + _attend(self.attn, self.norm1(q), self.norm1(kv), **attend)  # type: ignore[arg-type]
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class _Encoder(nn.Module):
    def __init__(self, n_blocks: int, d: int, n_heads: int, d_hidden: int, rope_base: float | None = None) -> None:
        super().__init__()
        if d % n_heads:
            raise ValueError(f"{d=} must be divisible by {n_heads=}")
        self.blocks = nn.ModuleList([Block(d, n_heads, d_hidden) for _ in range(n_blocks)])
        self.rope = _Rotary(d // n_heads, rope_base) if rope_base is not None else None

    def forward(self, x: Tensor, **attend: object) -> Tensor:
        for block in self.blocks:
            x = block(x, rope=self.rope, **attend)
        return x


# ------------------------------------------------------------------------------ column embedding (§3.3)
class ISAB(nn.Module):
    """Induced self-attention: inducing points read the training cells, every cell reads them back."""

    def __init__(self, d: int, n_heads: int, d_hidden: int, n_inducing: int) -> None:
        super().__init__()
        self.multihead_attn1 = Block(d, n_heads, d_hidden)
        self.multihead_attn2 = Block(d, n_heads, d_hidden)
        self.ind_vectors = nn.Parameter(torch.empty(n_inducing, d))
        nn.init.trunc_normal_(self.ind_vectors, std=0.02)

    def forward(self, x: Tensor, n_train: int) -> Tensor:  # (..., T, d)
        skip = (x == SKIP_VALUE).all(dim=-1).all(dim=-1)  # a column made only of skip markers stays one
        return self.read(x, self.summarize(x[..., :n_train, :]), skip)

    def summarize(self, x_train: Tensor) -> Tensor:
        """The inducing points after reading the training cells: (..., n_inducing, d)."""
        inducing = self.ind_vectors.expand(*x_train.shape[:-2], *self.ind_vectors.shape)
        return self.multihead_attn1(inducing, x_train)

    def read(self, x: Tensor, hidden: Tensor, skip: Tensor) -> Tensor:
        """Every cell of `x` reads `hidden` (each cell on its own); `skip`: the columns left as markers."""
        out = self.multihead_attn2(x, hidden)
        return torch.where(skip[..., None, None], torch.full_like(x, SKIP_VALUE), out)


def skippable(layer: nn.Linear, x: Tensor) -> Tensor:
    """`layer(x)`, with the output set to the skip marker where every input channel is the marker."""
    out = layer(x)
    return torch.where((x == SKIP_VALUE).all(dim=-1, keepdim=True), torch.full_like(out, SKIP_VALUE), out)


class _SetTransformer(nn.Module):
    def __init__(self, n_blocks: int, d: int, n_heads: int, d_hidden: int, n_inducing: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([ISAB(d, n_heads, d_hidden, n_inducing) for _ in range(n_blocks)])


class ColumnEmbedding(nn.Module):
    """Each cell -> cell * w + b, with w, b from a set transformer over its column (TabICL)."""

    def __init__(self, d: int, n_blocks: int, n_heads: int, d_hidden: int, n_inducing: int) -> None:
        super().__init__()
        self.in_linear = nn.Linear(1, d)
        self.tf_col = _SetTransformer(n_blocks, d, n_heads, d_hidden, n_inducing)
        self.out_w, self.ln_w = nn.Linear(d, d), nn.LayerNorm(d)
        self.out_b, self.ln_b = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x: Tensor, n_train: int) -> Tensor:  # (B, T, H) -> (B, T, H, d)
        # NOTE: the reference prepends n_special columns of skip markers here and drops their embeddings
        # later unread; we leave them out (the columns are independent, so the result is the same).
        cells = x.transpose(1, 2).unsqueeze(-1)  # (B, H, T, 1)
        src = skippable(self.in_linear, cells)
        for block in self.tf_col.blocks:
            src = block(src, n_train)
        weights = self.ln_w(skippable(self.out_w, src))
        biases = self.ln_b(skippable(self.out_b, src))
        return (cells * weights + biases).transpose(1, 2)


# -------------------------------------------------------------------- multi-scale row interaction (§3.4)
def block_sparse_mask(
    n_tokens: int, n_special: int, window: int, n_random: int, *, window_mode: Literal["reference", "paper"],
    generator: torch.Generator | None, device: torch.device | None = None,
) -> Tensor:
    """(n_tokens, n_tokens) bool, True = may attend: specials to and from everything (eq. 15), the sliding
    window (eq. 16; only under `window_mode="paper"`), `n_random` random feature keys per feature query
    (eq. 17, drawn from `generator`, or the global RNG when None), the diagonal (eq. 18)."""
    allowed = torch.zeros(n_tokens, n_tokens, dtype=torch.bool, device=device)
    allowed[:n_special, :] = True
    allowed[:, :n_special] = True
    if window_mode == "paper" and n_tokens > n_special and window >= 0:
        index = torch.arange(n_tokens, device=device)
        allowed |= (index[:, None] - index[None, :]).abs() <= window
    # NOTE[DIFF] (docs/deviations.md D20): under "reference" the window term is multiplied by 0, as released
    if n_random > 0 and n_tokens > n_special + 1:
        for i in range(n_special, n_tokens):  # one draw per query, in order: the reference's sequence
            draw = torch.randperm(n_tokens - n_special, device=device, generator=generator)
            allowed[i, draw[:n_random] + n_special] = True
    allowed.fill_diagonal_(True)
    return allowed


class _PMAGroup(nn.Module):
    """Learned soft grouping of feature tokens (the reference's `group_mode="pma"`)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.seed = nn.Parameter(torch.randn(1, 1, d) * 0.02)

    def forward(self, feats: Tensor, n_groups: int) -> Tensor:  # (B, T, H, d) -> (B, T, n_groups, d)
        d = feats.shape[-1]
        position = torch.arange(n_groups, device=feats.device, dtype=torch.float32)[:, None]
        omega = torch.exp(torch.arange(0, d, 2, device=feats.device).float() * (-math.log(10000.0) / d))
        sinusoid = torch.zeros(n_groups, d, device=feats.device)
        sinusoid[:, 0::2], sinusoid[:, 1::2] = torch.sin(position * omega), torch.cos(position * omega)
        query = self.q_proj(self.seed[0] + sinusoid)  # (n_groups, d)
        scores = query @ self.k_proj(feats).transpose(-1, -2) / math.sqrt(d)  # (B, T, n_groups, H)
        return scores.softmax(dim=-1) @ self.v_proj(feats)


def _group_mean(feats: Tensor, size: int) -> Tensor:
    """Contiguous groups of `size` feature tokens, mean-pooled; the last group is zero-padded and the
    padding counts in its mean (as in the reference)."""
    if size == 1:
        return feats
    pad = (-feats.shape[2]) % size
    feats = F.pad(feats, (0, 0, 0, pad))
    return feats.unflatten(2, (-1, size)).mean(dim=3)


class RowInteraction(nn.Module):
    def __init__(
        self, *, d: int, n_blocks: int, n_heads: int, d_hidden: int, n_cls: int, n_global: int,
        rope_base: float, scales: tuple[int, ...], window: int, n_random: int, group_mode: str,
    ) -> None:
        super().__init__()
        self.scales = tuple(sorted(set(scales)))
        if not self.scales or min(self.scales) < 1:
            raise ValueError(f"{scales=} must be a non-empty tuple of sizes >= 1")
        if group_mode not in ("contiguous", "pma"):
            raise ValueError(f"{group_mode=} must be 'contiguous' or 'pma'")
        self.n_cls, self.n_special = n_cls, n_cls + n_global
        self.window, self.n_random, self.group_mode = window, n_random, group_mode
        blocks_per_scale = max(1, math.ceil(n_blocks / len(self.scales)))
        self.scale_encoders = nn.ModuleList(
            [_Encoder(blocks_per_scale, d, n_heads, d_hidden, rope_base) for _ in self.scales]
        )
        self.cls_tokens = nn.Parameter(torch.empty(n_cls, d))
        self.global_tokens = nn.Parameter(torch.empty(n_global, d))
        nn.init.trunc_normal_(self.cls_tokens, std=0.02)
        nn.init.trunc_normal_(self.global_tokens, std=0.02)
        self.pma = _PMAGroup(d)  # in every checkpoint, used only when group_mode == "pma"
        self.out_ln = nn.LayerNorm(d)

    def masks(
        self, n_features: int, *, window_mode: Literal["reference", "paper"], generator: torch.Generator | None,
        device: torch.device | None = None,
    ) -> list[Tensor]:
        """One attention mask per scale, drawn in the scales' order (one call's random links)."""
        return [block_sparse_mask(self.n_special + math.ceil(n_features / size), self.n_special, self.window,
                                  self.n_random, window_mode=window_mode, generator=generator, device=device)
                for size in self.scales]

    def forward(
        self, feats: Tensor, *, window_mode: Literal["reference", "paper"], generator: torch.Generator | None,
        masks: list[Tensor] | None = None,
    ) -> Tensor:  # (B, T, H, d) -> (B, T, n_cls * d)
        B, T, H, d = feats.shape
        if masks is None:
            masks = self.masks(H, window_mode=window_mode, generator=generator, device=feats.device)
        specials = torch.cat([self.cls_tokens, self.global_tokens]).expand(B, T, self.n_special, d)
        cls_out = []
        for encoder, size, mask in zip(self.scale_encoders, self.scales, masks):
            if self.group_mode == "contiguous":
                grouped = _group_mean(feats, size)
            else:
                grouped = self.pma(feats, math.ceil(H / size))
            tokens = torch.cat([specials, grouped], dim=2)  # (B, T, n_special + K_s, d)
            cls_out.append(encoder(tokens, mask=mask)[..., : self.n_cls, :])
        return self.out_ln(torch.stack(cls_out).mean(dim=0)).flatten(-2)  # eqs. 19-20


# ------------------------------------------------------------------------- Perceiver memory (§3.5)
class _TransformerLayer(nn.Module):
    """The reference's memory "feed-forward": torch's pre-norm TransformerEncoderLayer (self-attention +
    FFN), re-stated so that its self-attention can be limited to the training rows."""

    def __init__(self, d: int, n_heads: int, d_hidden: int) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d, d_hidden), nn.Linear(d_hidden, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x: Tensor, n_keys: int | None) -> Tensor:
        h = self.norm1(x)
        x = x + _attend(self.self_attn, h, h, n_keys=n_keys)
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))


class CrossAttnBlock(nn.Module):
    def __init__(self, d: int, n_heads: int, d_hidden: int) -> None:
        super().__init__()
        self.q_norm, self.kv_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Block(d, n_heads, d_hidden)
        self.ffn = _TransformerLayer(d, n_heads, d_hidden)

    def forward(self, q: Tensor, kv: Tensor, n_context: int | None) -> Tensor:
        x = self.attn(self.q_norm(q), self.kv_norm(kv)) + q  # eqs. 33-35 (the block adds its own residual too)
        # NOTE[DIFF] (docs/deviations.md D21): eq. 36's FFN is a whole transformer layer across the rows
        return self.ffn(x, n_context)


class _PerceiverMemory(nn.Module):
    def __init__(self, d: int, n_heads: int, d_hidden: int, n_latents: int, n_layers: int) -> None:
        super().__init__()
        if 0 < n_latents < 4:
            raise ValueError(f"{n_latents=} must be 0 (no memory) or >= 4")
        self.latents = nn.Parameter(torch.empty(n_latents, d)) if n_latents > 0 else None
        if self.latents is not None:
            nn.init.trunc_normal_(self.latents, std=0.02)
        n = n_layers if n_latents > 0 else 0
        self.write_layers = nn.ModuleList([CrossAttnBlock(d, n_heads, d_hidden) for _ in range(n)])
        self.read_layers = nn.ModuleList([CrossAttnBlock(d, n_heads, d_hidden) for _ in range(n)])

    def forward(self, rows: Tensor, n_train: int, mode: Literal["reference", "split"]) -> Tensor:
        if self.latents is None:
            return rows
        latents = self.latents.expand(rows.shape[0], *self.latents.shape)
        for block in self.write_layers:  # eq. 38: only the training rows write
            latents = block(latents, rows[:, :n_train], None)
        for block in self.read_layers:  # eq. 41: every row reads
            rows = block(rows, latents, n_train if mode == "split" else None)
        return rows


# --------------------------------------------------------------------------------- ICL predictor (§3.6)
class ICLearning(nn.Module):
    def __init__(
        self, *, max_classes: int, d: int, n_blocks: int, n_heads: int, d_hidden: int, n_latents: int,
        n_memory_layers: int,
    ) -> None:
        super().__init__()
        self.max_classes = max_classes
        self.tf_icl = _Encoder(n_blocks, d, n_heads, d_hidden)
        self.ln = nn.LayerNorm(d)
        self.y_encoder = nn.Linear(max_classes, d)  # one-hot labels -> d (the reference's OneHotAndLinear)
        self.decoder = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, max_classes))
        self.memory = _PerceiverMemory(d, n_heads, d_hidden, n_latents, n_memory_layers)

    def forward(self, rows: Tensor, y_train: Tensor, memory: Literal["reference", "split"]) -> Tensor:
        n_train = y_train.shape[1]
        rows = self.memory(rows, n_train, memory)
        labels = self.y_encoder(F.one_hot(y_train.long(), self.max_classes).to(rows.dtype))
        rows = torch.cat([rows[:, :n_train] + labels, rows[:, n_train:]], dim=1)  # labels on training rows
        out = self.tf_icl(rows, n_keys=n_train)  # split mask: every row attends to the training rows
        return self.decoder(self.ln(out))[:, n_train:]  # (B, T_test, max_classes)
