"""SAINT (Somepalli et al. 2021) as the MultiTab authors run it: a single-task transformer with
inter-feature and inter-sample attention, one model per task.

Each task's model is MultiTab-Net with one task token (the [CLS] token), no mask, and one head: the
authors' SAINT has exactly that structure (their parameter count, 690,845 per Higgs task, is that of
a one-task, one-token MultiTab-Net).
NOTE[DIFF] (docs/deviations.md O11): compared with the SAINT paper: no contrastive / denoising
pre-training, a plain GELU FFN instead of GEGLU, per-feature linear numerical embeddings instead of
per-feature MLPs, a tower MLP head; all as in the MultiTab authors' baseline. `inter_sample` has
MultiTab-Net's meaning, and their `rope: true` maps to "per_sample_mixing" (see multitab_net.py,
defaults.py and docs/deviations.md). Dropout sites are MultiTab-Net's, i.e. the authors' SAINT's:
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
    in ``models``."""

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
