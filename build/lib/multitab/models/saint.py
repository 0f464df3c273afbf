"""SAINT (Somepalli et al. 2021) as the MultiTab authors run it: a single-task transformer with
inter-feature and inter-sample attention, one model per task.

Each task's model is MultiTab-Net with one task token (the [CLS] token), no mask, and one head: the
authors' SAINT has exactly that structure (their parameter count, 690,845 per Higgs task, is that of
a one-task, one-token MultiTab-Net).
NOTE[DIFF] (docs/deviations.md O11): compared with the SAINT paper: no contrastive / denoising
pre-training, a plain GELU FFN instead of GEGLU, per-feature linear numerical embeddings instead of
per-feature MLPs, a tower MLP head; all as in the MultiTab authors' baseline. `inter_sample` has
MultiTab-Net's meaning, and their `rope: true` maps to "per_sample_mixing" (see multitab_net.py,
multitab.hparams.authors and docs/deviations.md). Dropout sites are MultiTab-Net's, i.e. the authors' SAINT's:
`ffn_dropout` on the token embeddings, the attention outputs, inside the FFNs and in the tower.
"""

from __future__ import annotations

from collections.abc import Sequence

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import PerTask
from multitab.models.multitab_net import InterSample, MultiTabNet
from multitab.models.tokenizer import Init


class SAINT(PerTask):
    """forward(x_num [B, n_num], x_cat [B, n_cat]) -> {task: [B] or [B, n_classes]}; one SAINT per task
    in ``models``.

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - inside (per task): tokens ``(B, 1 + n_num + n_cat, d_embedding)``, the [CLS] token first; the
          inter-sample layer sees the batch as one sequence ``(1, B, (1 + n_num + n_cat) * d_embedding)``.
        - rows: with ``inter_sample="attention"`` (the default) or ``"rope_attention"`` a row's outputs
          depend on the other rows of its batch (and, with rotary positions, on its place in it), in
          training and in evaluation alike: keep evaluation batches fixed. With ``"per_sample_mixing"`` or
          ``"none"`` each row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.base import cat_cardinalities
        >>> from multitab.models.saint import SAINT
        >>> schema = get_schema("acs_income")  # 10 categorical features, no numerical; binary + 5-class task
        >>> model = SAINT(schema=schema, d_embedding=8, n_heads=2, ffn_d_hidden=16, head_d_hidden=(16,))
        >>> _ = torch.manual_seed(0)
        >>> cards = torch.tensor(cat_cardinalities(schema))  # codes of column j: 0 .. cards[j] - 1
        >>> x_num, x_cat = torch.randn(4, 0), (torch.rand(4, schema.n_cat) * cards).long()
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}
        {'income': (4,), 'marital': (4, 5)}
    """

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
        inter_sample: InterSample = "attention",
        init: Init = "authors",
    ) -> None:
        def make(single: DatasetSchema) -> MultiTabNet:
            return MultiTabNet(
                schema=single,
                d_embedding=d_embedding,
                n_blocks=n_blocks,
                n_heads=n_heads,
                ffn_d_hidden=ffn_d_hidden,
                head_d_hidden=head_d_hidden,
                attention_dropout=attention_dropout,
                ffn_dropout=ffn_dropout,
                multi_token=False,
                mask="none",
                inter_sample=inter_sample,
                init=init,
            )

        super().__init__(schema=schema, make=make)
