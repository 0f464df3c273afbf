"""MultiTab-Net (MultiTab, AAAI'26: "MultiTab-Net Architecture", "Multitask Masked Attention",
appendix "Inter-Sample Attention").

Tokens: t task tokens (one per task, or one shared) followed by the d feature tokens, each of width e
(task tokens first, as in the authors' code). Each of the N encoder blocks has
- inter-feature attention over the d + t tokens of a sample, with the multitask mask M_A of eq. (4)
  (additive -inf before the softmax; a task token always attends to itself):
  "none"; "t_t" (T->T blocked: a task token does not attend to other task tokens);
  "f_t" (F->T blocked: feature tokens do not attend to task tokens); "both";
- inter-sample attention over the samples of the batch on the flattened tokens ((d + t) * e), with
  its own projections ("attention"), optionally with rotary positions over the batch
  ("rope_attention"), or the authors' `rope: true` layer ("per_sample_mixing", see below), or "none";
each attention followed by a feed-forward network (Linear -> GELU -> dropout -> Linear), pre-norm
residual blocks with layer norms. After the blocks, task i's MLP head reads task token i (all heads
read the shared token when single).

Dropout as in the authors' MTT (docs/deviations.md S3): `ffn_dropout` (their `ff_dropout`) on the
token embeddings before the first block, on every attention output before its residual add, inside
every FFN, and in the task heads (``head_dropout``, default = ffn_dropout); `attention_dropout` (their
`att_dropout`) on the attention weights of the inter-feature layer and of the true inter-sample
attention (the per-sample mixing layer has no attention weights).

NOTE[DIFF] (docs/deviations.md P3): the authors' `rope: true` path, selected for Higgs and
AliExpress, does not attend across samples: each sample attends to itself alone, so the layer is a
per-sample dense mixing out(v(x)) plus its FFN. "per_sample_mixing" computes exactly that without the
dead query/key projections (their code has them: 2 (D^2 + D) more parameters that never train); it is
what protocol `authors_code` selects, so that their published numbers are reproduced. The paper's
text (inter-sample attention, with RoPE where they use `rope: true`) is "rope_attention", what
protocol `paper` selects; "attention" is the same without rotary positions.
The FFN activation is GELU as in the authors' code (the paper does not name one; blocks.FeedForward).
NOTE[DIFF] (docs/deviations.md P1, P2): task tokens and masks per dataset follow `protocol`
(hparams/protocol/paper.yaml, multitab.protocol).
Evaluation with inter-sample attention depends on which samples share a batch: keep test batches
fixed (order and size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities
from multitab.models.blocks import MixingLayer, TaskHeads, TransformerLayer
from multitab.models.tokenizer import INITS, FeatureTokenizer, Init, TaskTokens

Mask = Literal["none", "t_t", "f_t", "both"]
InterSample = Literal["attention", "rope_attention", "per_sample_mixing", "none"]
MASKS: tuple[str, ...] = ("none", "t_t", "f_t", "both")
INTER_SAMPLE: tuple[str, ...] = ("attention", "rope_attention", "per_sample_mixing", "none")


def attention_mask(n_task_tokens: int, n_features: int, mode: str) -> Tensor | None:
    """The additive mask M_A of eq. (4): [t + d, t + d], rows = queries, task tokens first;
    0 where attention is allowed, -inf where blocked. None for "none"."""
    if mode not in MASKS:
        raise ValueError(f"mask {mode=} must be one of {MASKS}")
    if mode == "none":
        return None
    t, n = n_task_tokens, n_task_tokens + n_features
    blocked = torch.zeros(n, n, dtype=torch.bool)
    if mode in ("t_t", "both"):
        blocked[:t, :t] = ~torch.eye(t, dtype=torch.bool)  # task i -/-> task j, j != i
    if mode in ("f_t", "both"):
        blocked[t:, :t] = True  # feature -/-> task
    return torch.zeros(n, n).masked_fill(blocked, float("-inf"))


class MultiTabNet(MultitaskModel):
    """forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits,
    regression) or [B, n_classes] (multiclass logits)}.

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - inside: tokens ``(B, t + n_num + n_cat, d_embedding)``, task tokens first (t = the number of
          tasks, or 1 with ``multi_token=False``); ``encode`` returns them after the blocks. The
          inter-sample layer sees the batch as one sequence ``(1, B, (t + n_num + n_cat) * d_embedding)``.
        - rows: with ``inter_sample="attention"`` or ``"rope_attention"`` a row's outputs depend on the
          other rows of its batch (and, with rotary positions, on its place in it), in training and in
          evaluation alike: keep evaluation batches fixed. With ``"per_sample_mixing"`` or ``"none"`` each
          row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.multitab_net import MultiTabNet
        >>> schema = get_schema("higgs")  # 17 numerical, 4 categorical (codes 0..2); binary + 7 regression
        >>> model = MultiTabNet(schema=schema, d_embedding=8, n_heads=2, ffn_d_hidden=16, head_d_hidden=(16,))
        >>> _ = torch.manual_seed(0)
        >>> x_num, x_cat = torch.randn(4, schema.n_num), torch.randint(0, 3, (4, schema.n_cat))
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'target': (4,), 'm_jj': (4,), 'm_jjj': (4,), 'm_lv': (4,), 'm_jlv': (4,),
         'm_bb': (4,), 'm_wbb': (4,), 'm_wwbb': (4,)}
        >>> tuple(model.encode(x_num, x_cat).shape)  # 8 task tokens + 21 feature tokens, width 8
        (4, 29, 8)
    """

    mask: Tensor | None

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        n_blocks: int = 1,
        n_heads: int = 4,
        ffn_d_hidden: int = 256,
        head_d_hidden: Sequence[int] = (64,),
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        head_dropout: float | None = None,
        multi_token: bool = True,
        mask: Mask = "t_t",
        inter_sample: InterSample = "attention",
        init: Init = "authors",
    ) -> None:
        super().__init__(schema=schema)
        if n_blocks < 1:
            raise ValueError(f"{n_blocks=} must be >= 1")
        if inter_sample not in INTER_SAMPLE:
            raise ValueError(f"{inter_sample=} must be one of {INTER_SAMPLE}")
        if init not in INITS:
            raise ValueError(f"{init=} must be one of {INITS}")
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num, cat_cardinalities=cat_cardinalities(schema), d_embedding=d_embedding, init=init
        )
        self.n_task_tokens = self.n_tasks if multi_token else 1
        self.task_tokens = TaskTokens(n_tokens=self.n_task_tokens, d_embedding=d_embedding, init=init)
        n_tokens = self.n_task_tokens + self.tokenizer.n_tokens
        self.register_buffer(
            "mask", attention_mask(self.n_task_tokens, self.tokenizer.n_tokens, mask), persistent=False
        )
        self.inter_sample = inter_sample
        common: dict[str, Any] = {
            "n_heads": n_heads,
            "ffn_d_hidden": ffn_d_hidden,
            "attention_dropout": attention_dropout,
            "ffn_dropout": ffn_dropout,
            "init": init,
        }
        self.feature_layers = nn.ModuleList(TransformerLayer(d=d_embedding, **common) for _ in range(n_blocks))
        d_sample = n_tokens * d_embedding
        self.sample_layers: nn.ModuleList | None
        if inter_sample in ("attention", "rope_attention"):
            rope = inter_sample == "rope_attention"
            # their standard attention keeps nn.MultiheadAttention's init, their rotary one is N(0, 0.01^2)
            self.sample_layers = nn.ModuleList(
                TransformerLayer(d=d_sample, rotary=rope, qkv_init="normal" if rope else "xavier", **common)
                for _ in range(n_blocks)
            )
        elif inter_sample == "per_sample_mixing":
            self.sample_layers = nn.ModuleList(MixingLayer(d=d_sample, **common) for _ in range(n_blocks))
        else:
            self.sample_layers = None
        self.embedding_dropout = nn.Dropout(ffn_dropout)
        self.heads = TaskHeads(
            d_in=d_embedding,
            d_hidden=head_d_hidden,
            d_out=self.d_out,
            dropout=ffn_dropout if head_dropout is None else head_dropout,
            init=init,
        )

    def encode(self, x_num: Tensor, x_cat: Tensor) -> Tensor:
        """-> all tokens after the encoder blocks: (B, t + d, e), task tokens first."""
        features = self.tokenizer(x_num, x_cat)  # (B, d, e)
        b, _, e = features.shape
        x = self.embedding_dropout(torch.cat([self.task_tokens(b), features], dim=1))  # (B, n_tokens, e)
        n = x.shape[1]
        for i, layer in enumerate(self.feature_layers):
            x = layer(x, self.mask)
            if self.sample_layers is None:
                continue
            if self.inter_sample == "per_sample_mixing":
                x = self.sample_layers[i](x.reshape(b, n * e)).view(b, n, e)
            else:  # the batch is the sequence: (1, B, n * e)
                x = self.sample_layers[i](x.reshape(1, b, n * e)).view(b, n, e)
        return x

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        x = self.encode(x_num, x_cat)
        tokens = x[:, : self.n_task_tokens]  # (B, t, e)
        if self.n_task_tokens != self.n_tasks:
            tokens = tokens.expand(-1, self.n_tasks, -1)  # every head reads the shared token
        return self.split_outputs(self.heads(tokens))
