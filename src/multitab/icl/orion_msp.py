"""Orion-MSP ("Multi-Scale Sparse Attention for Tabular In-Context Learning", Lexsi Labs, 2025): a pretrained
tabular in-context learner. TabICL's column embedder (a set transformer with inducing points per column,
§3.3), a multi-scale row encoder over CLS + GLOBAL tokens with a block-sparse mask (§3.4), a Perceiver memory
that training rows write and every row reads (§3.5), then the ICL transformer with a split mask and a
two-layer decoder to `max_classes` logits (§3.6). The blocks are in multitab.icl.orion_blocks; this module
assembles them and loads a released checkpoint.

Written from the paper and our reading of the authors' released model files (GitHub Lexsi-Labs/Orion-MSP,
the same files in tabtune 0.2.1, MIT; their column embedder and encoders come from TabICL, BSD-3, and
their rotary embedding from lucidrains' rotary-embedding-torch, MIT: notices in docs/icl.md). Module and
parameter names follow the released checkpoint's state dict so that its weights load as they are.

Faithful to the released weights by default; the reference's departures from the paper are switches
(docs/deviations.md):
- `window`: the reference multiplies the sliding-window term of the block-sparse mask by 0, so a feature
  token sees only the special tokens, itself and its random links. `reference` keeps that; `paper` lets it
  see its neighbours within `row_window` (eq. 16).
- `memory`: the reference's memory blocks end in a whole transformer layer whose self-attention runs over
  every row of the call, test rows included, so a test row's prediction depends on the other test rows.
  `reference` keeps that; `split` lets every row attend to the training rows only (eqs. 36 and 41: test
  rows never influence the context).
- `links`: the reference draws its random links from the global RNG on every call; `seeded` draws them
  from a generator seeded with `link_seed` on every call (the same links for the same call).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from multitab.icl.orion_blocks import ColumnEmbedding, ICLearning, RowInteraction

# the released checkpoint's config keys -> our constructor's keywords
CONFIG_KEYS: dict[str, str] = {
    "max_classes": "max_classes", "embed_dim": "d_embedding",
    "col_num_blocks": "col_n_blocks", "col_nhead": "col_n_heads", "col_num_inds": "col_n_inducing",
    "row_num_blocks": "row_n_blocks", "row_nhead": "row_n_heads", "row_num_cls": "row_n_cls",
    "row_rope_base": "row_rope_base", "icl_num_blocks": "icl_n_blocks", "icl_nhead": "icl_n_heads",
    "ff_factor": "ff_factor", "dropout": "dropout", "activation": "activation", "norm_first": "norm_first",
    "row_num_global": "row_n_global", "row_scales": "row_scales", "row_window": "row_window",
    "row_num_random": "row_n_random", "row_group_mode": "row_group_mode",
    "perc_num_latents": "memory_n_latents", "perc_layers": "memory_n_layers",
}


class OrionMSP(nn.Module):
    """Orion-MSP for one table: logits of the test rows given labelled training rows (eval only; a
    pretrained model, never trained here).

    Shape:
        - ``x``: ``(B, T, H)`` float, the first ``n_train`` rows of each table are the context;
        - ``y_train``: ``(B, n_train)`` labels in ``0..n_classes-1`` (at most ``max_classes``);
        - output: ``(B, T - n_train, n_classes)`` logits, ``n_classes`` = the number of distinct labels
          in ``y_train[0]`` (as the reference slices them); beyond ``max_classes`` classes, through the
          released hierarchy of class groups, ``softmax_temperature * log(p + 1e-6)``.

    Examples:
        >>> model = OrionMSP(d_embedding=8, col_n_blocks=1, col_n_heads=2, col_n_inducing=4,
        ...     row_n_blocks=1, row_n_heads=2, row_n_cls=2, icl_n_blocks=1, icl_n_heads=2,
        ...     row_scales=(1,), memory_n_latents=4, memory_n_layers=1).eval()
        >>> model(torch.randn(1, 7, 3), torch.tensor([[0, 1, 0, 1, 1]])).shape
        torch.Size([1, 2, 2])
    """

    def __init__(
        self, *, max_classes: int = 10, d_embedding: int = 128, col_n_blocks: int = 3, col_n_heads: int = 4,
        col_n_inducing: int = 128, row_n_blocks: int = 3, row_n_heads: int = 8, row_n_cls: int = 4,
        row_rope_base: float = 100000, icl_n_blocks: int = 12, icl_n_heads: int = 4, ff_factor: int = 2,
        dropout: float = 0.0, activation: str = "gelu", norm_first: bool = True, row_n_global: int = 2,
        row_scales: tuple[int, ...] = (1, 4, 8), row_window: int = 4, row_n_random: int = 0,
        row_group_mode: str = "contiguous", memory_n_latents: int = 16, memory_n_layers: int = 2,
        window: Literal["reference", "paper"] = "reference", memory: Literal["reference", "split"] = "reference",
        links: Literal["reference", "seeded"] = "seeded", link_seed: int = 0, softmax_temperature: float = 0.9,
    ) -> None:
        super().__init__()
        if activation != "gelu" or not norm_first:
            raise ValueError(f"only the released architecture is supported: {activation=} must be 'gelu', "
                             f"{norm_first=} must be True")
        for name, value, allowed in (("window", window, ("reference", "paper")),
                                     ("memory", memory, ("reference", "split")),
                                     ("links", links, ("reference", "seeded"))):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} must be one of {allowed}")
        if max_classes < 2:
            raise ValueError(f"{max_classes=} must be >= 2")
        del dropout  # inference only: dropout is off
        self.max_classes, self.window, self.memory, self.links, self.link_seed = (
            max_classes, window, memory, links, link_seed)
        self.softmax_temperature = softmax_temperature  # of the hierarchy's probabilities (released: 0.9)
        d, d_row = d_embedding, d_embedding * row_n_cls
        self.col_embedder = ColumnEmbedding(d, col_n_blocks, col_n_heads, d * ff_factor, col_n_inducing)
        self.row_interactor = RowInteraction(
            d=d, n_blocks=row_n_blocks, n_heads=row_n_heads, d_hidden=d * ff_factor, n_cls=row_n_cls,
            n_global=row_n_global, rope_base=row_rope_base, scales=tuple(row_scales), window=int(row_window),
            n_random=int(row_n_random), group_mode=row_group_mode.lower(),
        )
        self.icl_predictor = ICLearning(
            max_classes=max_classes, d=d_row, n_blocks=icl_n_blocks, n_heads=icl_n_heads,
            d_hidden=d_row * ff_factor, n_latents=memory_n_latents, n_memory_layers=memory_n_layers,
        )

    def forward(self, x: Tensor, y_train: Tensor) -> Tensor:
        n_train = y_train.shape[1]
        if x.dim() != 3 or y_train.dim() != 2 or not 0 < n_train <= x.shape[1]:
            raise ValueError(f"x {tuple(x.shape)} must be (B, T, H) and y_train {tuple(y_train.shape)} (B, n_train)"
                             " with 0 < n_train <= T")
        n_classes = int(torch.unique(y_train[0]).numel())
        generator = None
        if self.links == "seeded":  # NOTE[DIFF] (docs/deviations.md D22): the released code uses the global RNG
            generator = torch.Generator(device=x.device).manual_seed(self.link_seed)
        emb = self.col_embedder(x, n_train)  # (B, T, H, d)
        rows = self.row_interactor(emb, window_mode=self.window, generator=generator)  # (B, T, n_cls * d)
        if n_classes <= self.max_classes:
            return self.icl_predictor(rows, y_train, self.memory)[..., :n_classes]
        # more classes than the decoder has: the released hierarchy, per table; its "logits" are
        # temperature * log(probability + 1e-6), as the reference returns them
        probs = torch.stack([self._hierarchy(r, y) for r, y in zip(rows, y_train)])
        return self.softmax_temperature * torch.log(probs + 1e-6)

    def _predict(self, context: Tensor, labels: Tensor, test: Tensor) -> Tensor:
        """Probabilities (at temperature) over the classes 0..k-1 of `labels`, k = their number."""
        k = int(labels.max()) + 1
        logits = self.icl_predictor(torch.cat([context, test])[None], labels[None].float(), self.memory)[0]
        return torch.softmax(logits[:, :k] / self.softmax_temperature, dim=-1)

    def _hierarchy(self, rows: Tensor, y_train: Tensor) -> Tensor:
        """(T_test, n_classes) probabilities: classes split into at most `max_classes` balanced contiguous
        groups, recursively; a class's probability is the product of its groups' probabilities down to a
        node of at most `max_classes` classes (the released model's hierarchical classification)."""
        n_train, n_all = y_train.shape[0], int(y_train.max()) + 1
        test = rows[n_train:]

        def node(context: Tensor, labels: Tensor) -> Tensor:
            classes = torch.unique(labels)
            local = torch.searchsorted(classes, labels)
            out = test.new_zeros(test.shape[0], n_all)
            if len(classes) <= self.max_classes:
                out[:, classes.long()] = self._predict(context, local, test)
                return out
            n_groups = min(math.ceil(len(classes) / self.max_classes), self.max_classes)
            sizes, left = [], len(classes)
            for g in range(n_groups):
                sizes.append(math.ceil(left / (n_groups - g)))
                left -= sizes[-1]
            group_of_class = torch.repeat_interleave(torch.arange(n_groups), torch.tensor(sizes)).to(labels.device)
            groups = group_of_class[local]
            group_probs = self._predict(context, groups, test)
            for g in range(n_groups):
                out += node(context[groups == g], labels[groups == g]) * group_probs[:, g : g + 1]
            return out

        return node(rows[:n_train], y_train.long())


def from_checkpoint(
    checkpoint: dict[str, object], *, window: Literal["reference", "paper"] = "reference",
    memory: Literal["reference", "split"] = "reference", links: Literal["reference", "seeded"] = "seeded",
    link_seed: int = 0,
) -> OrionMSP:
    """The model of a released checkpoint (`{"config": {...}, "state_dict": {...}}`), in eval mode."""
    config, state = checkpoint.get("config"), checkpoint.get("state_dict")
    if not isinstance(config, dict) or not isinstance(state, dict):
        raise ValueError("an Orion-MSP checkpoint is a dict with a 'config' dict and a 'state_dict' dict; "
                         f"this one has keys {sorted(checkpoint)}")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"the checkpoint's config has keys this model does not know: {unknown}")
    kwargs = {CONFIG_KEYS[key]: value for key, value in config.items()}
    model = OrionMSP(**kwargs, window=window, memory=memory, links=links, link_seed=link_seed)
    model.load_state_dict(state)
    return model.eval()
