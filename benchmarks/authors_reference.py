"""A structural re-creation of the MultiTab authors' MultiTab-Net, for speed comparisons only.

Written from docs/deviations.md and the notes there (their code is not copied): per-feature nn.Linear(1, e) /
nn.Embedding modules applied in a Python loop, task tokens as a constant 1 through their own
nn.Linear(1, e), inter-feature nn.MultiheadAttention (need_weights left at its default), an
inter-sample layer that is either nn.MultiheadAttention over the batch (rope=False) or their rotary
module that reads its (1, B, D) input as (sequence, batch, embedding) so that each sample attends to
itself (rope=True: q/k/v/out projections all computed, d_head / 2 frequency parameters), pre-norm
residual blocks with GELU FFNs and their (here p = 0) dropout calls on the embeddings and the attention
outputs, one nn.Sequential head per task in a loop. Its parameter count equals
theirs (1,123,074 on Higgs with rope=True), which the benchmark checks. Measuring it in the same run
as our model gives a speed ratio that does not depend on how loaded the machine is.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema


def _init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear | nn.Embedding):
        nn.init.normal_(m.weight, 0.0, 0.01)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)


class _RotaryAttention(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        dh = d // n_heads
        self.inv_freq = nn.Parameter(1.0 / 10000 ** (torch.arange(0, dh, 2).float() / dh), requires_grad=False)

    def _rope(self, x: Tensor) -> Tensor:  # x: (batch, h, seq, dh), positions along seq
        pos = torch.arange(x.shape[2], dtype=torch.float32)
        f = torch.outer(pos, self.inv_freq)
        emb = torch.cat((f, f), -1)
        x1, x2 = x.chunk(2, -1)
        return x * emb.cos() + torch.cat((-x2, x1), -1) * emb.sin()

    def forward(self, x: Tensor) -> Tensor:  # x read as (seq, batch, d)
        s, b, d = x.shape
        def heads(t: Tensor) -> Tensor:
            return t.view(s, b, self.h, d // self.h).permute(1, 2, 0, 3)  # (batch, h, seq, dh)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        q, k = self._rope(q), self._rope(k)
        a = (q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)).softmax(-1)
        y = (a @ v).permute(2, 0, 1, 3).reshape(s, b, d)
        return self.o(y)


class _Block(nn.Module):
    def __init__(self, d: int, ff: int, attn: nn.Module) -> None:
        super().__init__()
        self.n1, self.attn, self.n2 = nn.LayerNorm(d), attn, nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Dropout(0.0), nn.Linear(ff, d))
        self.drop = nn.Dropout(0.0)


class AuthorsStyleMultiTabNet(nn.Module):
    def __init__(self, schema: DatasetSchema, *, e: int = 16, ff: int = 256, heads: int = 4, rope: bool = True,
                 tower: int = 64) -> None:
        super().__init__()
        self.num = nn.ModuleList(nn.Linear(1, e) for f in schema.features if f.kind == "numerical")
        self.cat = nn.ModuleList(nn.Embedding(f.cardinality or 1, e)
                                 for f in schema.features if f.kind == "categorical")
        t = len(schema.tasks)
        self.task = nn.ModuleList(nn.Linear(1, e) for _ in range(t))
        n = t + len(self.num) + len(self.cat)
        mask = torch.zeros(n, n, dtype=torch.bool)
        mask[:t, :t] = ~torch.eye(t, dtype=torch.bool)
        self.register_buffer("mask", mask)
        self.col = _Block(e, ff, nn.MultiheadAttention(e, heads, batch_first=True))
        d = n * e
        self.rope = rope
        row_attention = _RotaryAttention(d, heads) if rope else nn.MultiheadAttention(d, heads, batch_first=True)
        self.row = _Block(d, ff, row_attention)
        self.heads = nn.ModuleList(nn.Sequential(nn.Linear(e, tower), nn.ReLU(), nn.Dropout(0.0), nn.Linear(tower, 1))
                                   for _ in range(t))
        for m in self.modules():
            if type(m) is nn.Linear or isinstance(m, nn.Embedding):
                _init(m)
        self.names = schema.task_names

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        b = x_num.shape[0]
        ones = torch.ones(b, 1)
        toks = [m(ones) for m in self.task]
        toks += [m(x_num[:, i : i + 1]) for i, m in enumerate(self.num)]
        toks += [m(x_cat[:, i]) for i, m in enumerate(self.cat)]
        x = self.col.drop(torch.stack(toks, 1))  # (B, n, e)
        h = self.col.n1(x)
        x = x + self.col.drop(self.col.attn(h, h, h, attn_mask=self.mask)[0])
        x = x + self.col.ff(self.col.n2(x))
        n, e = x.shape[1], x.shape[2]
        z = x.reshape(1, b, n * e)
        h = self.row.n1(z)
        z = z + self.row.drop(self.row.attn(h) if self.rope else self.row.attn(h, h, h)[0])
        z = z + self.row.ff(self.row.n2(z))
        x = z.view(b, n, e)
        return {name: head(x[:, i]).squeeze(-1) for i, (name, head) in enumerate(zip(self.names, self.heads))}
