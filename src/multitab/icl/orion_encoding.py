"""Orion-MSP with its context encoded once and read by every test chunk and every task (multitab.icl.orion_msp).

A test row of Orion-MSP sees the context only through what the context's rows compute, and in these parts
of the network that does not depend on the test rows:

- the column embedder: the inducing points read the context's cells only; each cell then reads them on
  its own (TabICL's ISAB);
- the row interactor: each row on its own (with one call's random links, drawn once here);
- under `memory="split"` also the memory (the latents are written by the context's rows; its last layer
  lets every row attend to the context's rows only) and the ICL transformer (the split mask): the
  context's keys and values of every layer are computed once per set of labels.

So `encode_context` runs the context through the label-independent parts once (a view's encoding, shared by
the tasks of a dataset), `encode_rows` runs test rows through them, and `logits` predicts a chunk of test
rows from those encodings. Under `memory="split"` that is the network's own result computed once instead
of per chunk; under the released `memory="reference"` a test row's prediction depends on the other rows of
its call (docs/deviations.md D21), so the memory and the ICL transformer still run over the context and
each chunk together, and only the label-independent encoders are reused. Beyond `max_classes` classes the
released hierarchy of class groups runs over the encoded rows as `OrionMSP` runs it.

Equal to `OrionMSP.forward` on the same rows up to float rounding (tests/test_icl_encoding.py), except for
a context column made of nothing but the skip marker (-100 in every cell, which scaled and soft-clipped
inputs never are), where the full call would also let test cells decide whether the column is skipped.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from multitab.icl.orion_blocks import ISAB, SKIP_VALUE, Block, CrossAttnBlock, skippable
from multitab.icl.orion_msp import OrionMSP


@dataclass
class EncodedContext:
    """A context's label-independent encoding (batch of one table)."""

    hiddens: list[Tensor]  # per column-embedder block, the inducing points after the context: (1, H, n_inducing, d)
    skips: list[Tensor]  # per block, the context's columns made only of skip markers: (1, H)
    masks: list[Tensor]  # the row interactor's attention masks, one per scale
    rows: Tensor  # (1, n_context, d_row): the context's rows before the memory
    memory: _SplitMemory | None  # under memory="split": the memory's state after the context
    labelled: dict[bytes, list[tuple[Tensor, Tensor]]] = field(default_factory=dict)  # ICL keys/values per labels


@dataclass
class _SplitMemory:
    rows: Tensor  # (1, n_context, d_row): the context's rows after the memory
    latents: Tensor  # (1, n_latents, d_row) after the write layers
    keys_values: list[tuple[Tensor, Tensor]]  # per read layer, its self-attention's keys and values of the context


def _project_kv(attn: nn.MultiheadAttention, kv: Tensor) -> tuple[Tensor, Tensor]:
    """`attn`'s keys and values of `kv` (..., L, d), split into heads: (..., n_heads, L, d_head) each."""
    d = kv.shape[-1]
    assert attn.in_proj_bias is not None
    key, value = F.linear(kv, attn.in_proj_weight[d:], attn.in_proj_bias[d:]).chunk(2, dim=-1)
    return tuple(t.unflatten(-1, (attn.num_heads, -1)).transpose(-3, -2) for t in (key, value))  # type: ignore[return-value]


def _attend_kv(attn: nn.MultiheadAttention, q: Tensor, key: Tensor, value: Tensor) -> Tensor:
    """Multi-head attention of `q` over projected `key`/`value` (as orion_blocks._attend, without rope or mask)."""
    d = q.shape[-1]
    assert attn.in_proj_bias is not None
    query = F.linear(q, attn.in_proj_weight[:d], attn.in_proj_bias[:d])
    query = query.unflatten(-1, (attn.num_heads, -1)).transpose(-3, -2)
    out = F.scaled_dot_product_attention(query, key, value)
    return attn.out_proj(out.transpose(-3, -2).flatten(-2))


def _embed(model: OrionMSP, x: Tensor, context: EncodedContext | None) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """The column embedding of `x` (1, T, H) -> (1, T, H, d); without `context`, `x` is the context."""
    emb = model.col_embedder
    cells = x.transpose(1, 2).unsqueeze(-1)  # (1, H, T, 1)
    src = skippable(emb.in_linear, cells)
    hiddens, skips = [], []
    for i, block in enumerate(typing.cast(list[ISAB], emb.tf_col.blocks)):
        skip = (src == SKIP_VALUE).all(dim=-1).all(dim=-1)
        if context is None:
            hidden = block.summarize(src)
        else:
            hidden, skip = context.hiddens[i], skip & context.skips[i]
        hiddens.append(hidden)
        skips.append(skip)
        src = block.read(src, hidden, skip)
    weights = emb.ln_w(skippable(emb.out_w, src))
    biases = emb.ln_b(skippable(emb.out_b, src))
    return (cells * weights + biases).transpose(1, 2), hiddens, skips


def _row_states(model: OrionMSP, x: Tensor, context: EncodedContext) -> Tensor:
    emb, _, _ = _embed(model, x, context)
    return model.row_interactor(emb, window_mode=model.window, generator=None, masks=context.masks)


def encode_context(model: OrionMSP, x: Tensor) -> EncodedContext:
    """The context `x` (1, n_context, H) through the label-independent parts (see module docstring)."""
    generator = None
    if model.links == "seeded":  # as OrionMSP.forward: the links of one call
        generator = torch.Generator(device=x.device).manual_seed(model.link_seed)
    masks = model.row_interactor.masks(x.shape[2], window_mode=model.window, generator=generator, device=x.device)
    emb, hiddens, skips = _embed(model, x, None)
    rows = model.row_interactor(emb, window_mode=model.window, generator=None, masks=masks)
    context = EncodedContext(hiddens, skips, masks, rows, None)
    memory = model.icl_predictor.memory
    if model.memory == "split":
        if memory.latents is None:
            context.memory = _SplitMemory(rows, rows.new_zeros(1, 0, rows.shape[-1]), [])
        else:
            latents = memory.latents.expand(1, *memory.latents.shape)
            for block in memory.write_layers:  # eq. 38
                latents = block(latents, rows, None)
            states, keys_values = rows, []
            for block in memory.read_layers:
                states, kv = _read_memory(typing.cast(CrossAttnBlock, block), states, latents, None)
                keys_values.append(kv)
            context.memory = _SplitMemory(states, latents, keys_values)
    return context


def _read_memory(block: CrossAttnBlock, rows: Tensor, latents: Tensor,
                 kv: tuple[Tensor, Tensor] | None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """One memory read layer under memory="split" (orion_blocks.CrossAttnBlock); `kv`: the context's keys and
    values of its self-attention (None: `rows` are the context, whose own keys and values are returned)."""
    x = block.attn(block.q_norm(rows), block.kv_norm(latents)) + rows
    ffn = block.ffn
    h = ffn.norm1(x)
    kv = _project_kv(ffn.self_attn, h) if kv is None else kv
    x = x + _attend_kv(ffn.self_attn, h, *kv)
    return x + ffn.linear2(F.gelu(ffn.linear1(ffn.norm2(x)))), kv


def encode_rows(model: OrionMSP, context: EncodedContext, x: Tensor) -> Tensor:
    """Test rows `x` (1, m, H) through the label-independent encoders given the context: (1, m, d_row),
    before the memory."""
    return _row_states(model, x, context)


def _labelled(model: OrionMSP, context: EncodedContext, y: Tensor) -> list[tuple[Tensor, Tensor]]:
    """The ICL transformer's keys and values of the labelled context, per block (split memory only)."""
    key = y.cpu().numpy().tobytes()
    if key not in context.labelled:
        icl = model.icl_predictor
        assert context.memory is not None
        states = context.memory.rows + icl.y_encoder(F.one_hot(y.long(), icl.max_classes).to(context.rows.dtype))[None]
        keys_values = []
        for block in typing.cast(list[Block], icl.tf_icl.blocks):
            h = block.norm1(states)
            kv = _project_kv(block.attn, h)
            keys_values.append(kv)
            states = states + _attend_kv(block.attn, h, *kv)
            states = states + block.linear2(F.gelu(block.linear1(block.norm2(states))))
        context.labelled = {key: keys_values}  # one set of labels at a time: a task's
    return context.labelled[key]


def logits(model: OrionMSP, context: EncodedContext, y: Tensor, rows: Tensor) -> Tensor:
    """Logits (1, m, n_classes) of encoded test rows `rows` (1, m, d_row) given the context's labels `y`
    (n_context,) in 0..n_classes-1; as OrionMSP.forward on the context followed by those rows."""
    n_classes = int(torch.unique(y).numel())
    if n_classes > model.max_classes:  # the released hierarchy, over the encoded rows as OrionMSP.forward
        table = torch.cat([context.rows, rows], dim=1)[0]
        return (model.softmax_temperature * torch.log(model._hierarchy(table, y) + 1e-6))[None]
    icl = model.icl_predictor
    if context.memory is None:  # memory="reference": the chunk's rows and the context's together
        table = torch.cat([context.rows, rows], dim=1)
        return icl(table, y[None].float(), model.memory)[..., :n_classes]
    memory = icl.memory
    states = rows
    if memory.latents is not None:
        for layer, kv in zip(typing.cast(list[CrossAttnBlock], memory.read_layers), context.memory.keys_values):
            states, _ = _read_memory(layer, states, context.memory.latents, kv)
    for block, kv in zip(typing.cast(list[Block], icl.tf_icl.blocks), _labelled(model, context, y)):
        states = states + _attend_kv(block.attn, block.norm1(states), *kv)
        states = states + block.linear2(F.gelu(block.linear1(block.norm2(states))))
    return icl.decoder(icl.ln(states))[..., :n_classes]
