"""Vectorised input tokens: every feature and every task becomes one e-dimensional token.

- numerical column j: ``x_j * W_j + b_j`` (FT-Transformer's feature tokenizer, Gorishniy et al. 2021,
  section 3.3; the same as the MultiTab authors' per-feature ``Linear(1, e)``), computed for all columns
  in one broadcast op: weight [n_num, e] * x_num[..., None] + bias.
- categorical column j: a row of one shared embedding table holding every column's values, addressed
  with per-column offsets (one gather for all columns); an optional per-column bias (FT-Transformer)
  that the MultiTab authors' models do not have.
- task tokens: one learned vector per task (or one shared). The authors build a task token as a
  constant 1 through its own ``Linear(1, e)``, i.e. weight + bias; we keep both tensors so parameter
  counts equal theirs (the sum is the token; the split is redundant for the function).

Init: ``"authors"`` = N(0, 0.01^2) weights and zero biases (docs/deviations.md S4);
``"rtdl"`` = U(-1/sqrt(e), 1/sqrt(e)) for weights and biases as in rtdl_revisiting_models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

Init = Literal["authors", "rtdl"]
INITS: tuple[str, ...] = ("authors", "rtdl")


def _check_init(init: str) -> None:
    if init not in INITS:
        raise ValueError(f"{init=} must be one of {INITS}")


def init_weight_(weight: Tensor, init: Init, d: int) -> None:
    """Initialise a weight tensor in place: N(0, 0.01^2) ("authors") or U(+-1/sqrt(d)) ("rtdl")."""
    if init == "authors":
        nn.init.normal_(weight, 0.0, 0.01)
    else:
        bound = 1 / math.sqrt(d)
        nn.init.uniform_(weight, -bound, bound)


def init_bias_(bias: Tensor, init: Init, d: int) -> None:
    if init == "authors":
        nn.init.zeros_(bias)
    else:
        bound = 1 / math.sqrt(d)
        nn.init.uniform_(bias, -bound, bound)


class FeatureTokenizer(nn.Module):
    """(x_num [B, n_num] float, x_cat [B, n_cat] long) -> tokens [B, n_num + n_cat, d_embedding].

    Numerical tokens come first, then categorical ones (the schema's feature order within each kind).
    ``cat_cardinalities[j]`` counts column j's codes 0..cardinality-1 (processed data: including the
    reserved index 0). Either kind may have zero columns; pass an empty [B, 0] tensor (or None).
    """

    cat_offsets: Tensor

    def __init__(
        self,
        *,
        n_num: int,
        cat_cardinalities: Sequence[int],
        d_embedding: int,
        cat_bias: bool = False,
        init: Init = "authors",
    ) -> None:
        super().__init__()
        if n_num < 0:
            raise ValueError(f"{n_num=} must be >= 0")
        if d_embedding < 1:
            raise ValueError(f"{d_embedding=} must be >= 1")
        bad = [c for c in cat_cardinalities if c < 1]
        if bad:
            raise ValueError(f"cat_cardinalities must all be >= 1, got {list(cat_cardinalities)}")
        if n_num + len(cat_cardinalities) == 0:
            raise ValueError("a model needs at least one feature (n_num + n_cat == 0)")
        _check_init(init)
        self.n_num = n_num
        self.n_cat = len(cat_cardinalities)
        self.d_embedding = d_embedding
        self.cat_cardinalities = tuple(int(c) for c in cat_cardinalities)
        self.num_weight = nn.Parameter(torch.empty(n_num, d_embedding)) if n_num else None
        self.num_bias = nn.Parameter(torch.empty(n_num, d_embedding)) if n_num else None
        if self.n_cat:
            offsets = torch.tensor((0, *self.cat_cardinalities[:-1])).cumsum(0)
            self.register_buffer("cat_offsets", offsets, persistent=False)
            self.cat_embedding: nn.Embedding | None = nn.Embedding(sum(self.cat_cardinalities), d_embedding)
            self.cat_bias = nn.Parameter(torch.empty(self.n_cat, d_embedding)) if cat_bias else None
        else:
            self.cat_embedding = None
            self.cat_bias = None
        self.reset_parameters(init)

    def reset_parameters(self, init: Init = "authors") -> None:
        _check_init(init)
        d = self.d_embedding
        if self.num_weight is not None and self.num_bias is not None:
            init_weight_(self.num_weight, init, d)
            init_bias_(self.num_bias, init, d)
        if self.cat_embedding is not None:
            init_weight_(self.cat_embedding.weight, init, d)
        if self.cat_bias is not None:
            init_bias_(self.cat_bias, init, d)

    @property
    def n_tokens(self) -> int:
        return self.n_num + self.n_cat

    def forward(self, x_num: Tensor | None, x_cat: Tensor | None) -> Tensor:
        parts: list[Tensor] = []
        if self.num_weight is not None and self.num_bias is not None:
            if x_num is None or x_num.ndim != 2 or x_num.shape[1] != self.n_num:
                got = None if x_num is None else tuple(x_num.shape)
                raise ValueError(f"x_num must have shape [batch, {self.n_num}], got {got}")
            parts.append(x_num[..., None] * self.num_weight + self.num_bias)  # (B, n_num, e)
        if self.cat_embedding is not None:
            if x_cat is None or x_cat.ndim != 2 or x_cat.shape[1] != self.n_cat:
                got = None if x_cat is None else tuple(x_cat.shape)
                raise ValueError(f"x_cat must have shape [batch, {self.n_cat}], got {got}")
            tokens = self.cat_embedding(x_cat + self.cat_offsets)  # (B, n_cat, e): one gather
            if self.cat_bias is not None:
                tokens = tokens + self.cat_bias
            parts.append(tokens)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def flops(self, inputs: tuple[Tensor, ...], output: Tensor) -> int:
        """MACs, counted as ptflops counts the authors' per-feature Linear(1, e) (the gather: 0)."""
        b, e = output.shape[0], self.d_embedding
        return self.n_num * (b * e + e) + (b * self.n_cat * e if self.cat_bias is not None else 0)


class TaskTokens(nn.Module):
    """``n_tokens`` learned task tokens, expanded over the batch: -> [B, n_tokens, d_embedding].

    Stored as weight + bias of the authors' ``Linear(1, e)`` fed a constant 1 (see module docstring).
    """

    def __init__(self, *, n_tokens: int, d_embedding: int, init: Init = "authors") -> None:
        super().__init__()
        if n_tokens < 1:
            raise ValueError(f"{n_tokens=} must be >= 1")
        _check_init(init)
        self.weight = nn.Parameter(torch.empty(n_tokens, d_embedding))
        self.bias = nn.Parameter(torch.empty(n_tokens, d_embedding))
        init_weight_(self.weight, init, 1)  # rtdl-style fan-in of Linear(1, e) is 1
        init_bias_(self.bias, init, 1)

    def forward(self, batch_size: int) -> Tensor:
        return (self.weight + self.bias).expand(batch_size, -1, -1)

    def flops(self, inputs: tuple[int, ...], output: Tensor) -> int:
        """MACs as ptflops counts their Linear(1, e) per token on a [B, 1] input of ones."""
        b, t, e = output.shape
        return t * (b * e + e)
