"""MTL shared bottom (Caruana 1997): a shared MLP over the embedded inputs, then one MLP tower per task.

The MultiTab paper's multitask baseline ("Baselines"; its code calls it mt_mlp). As the paper says, the
inputs are embedded first ("we transform the inputs to embeddings for all baselines"): every feature
becomes a d_embedding token (FeatureTokenizer, no categorical bias) and the tokens are concatenated.

Shapes follow the authors' code, so parameter counts equal theirs (docs/deviations.md, Higgs:
188,264 at shared [256, 128], towers [64], d_embedding 16): hidden layers Linear -> BatchNorm -> ReLU ->
Dropout, in the shared bottom and in the towers; N(0, 0.01^2) initialisation.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities
from multitab.models.mlp_blocks import BatchedMLP, Towers, check_dims, check_dropout, init_normal_
from multitab.models.tokenizer import FeatureTokenizer


class MTLSharedBottom(MultitaskModel):
    """Shared-bottom multitask MLP.

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}.
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        shared_d_hidden: Sequence[int] = (256, 128),
        tower_d_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ) -> None:
        super().__init__(schema=schema)
        shared_d_hidden = check_dims("shared_d_hidden", shared_d_hidden)
        tower_d_hidden = check_dims("tower_d_hidden", tower_d_hidden, allow_empty=True)
        dropout = check_dropout(dropout)
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num, cat_cardinalities=cat_cardinalities(schema), d_embedding=d_embedding
        )
        d_in = self.tokenizer.n_tokens * d_embedding
        self.shared = BatchedMLP(1, d_in, shared_d_hidden, dropout)
        self.towers = Towers(schema.tasks, shared_d_hidden[-1], tower_d_hidden, dropout)
        init_normal_(self)

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        x = self.tokenizer(x_num, x_cat).flatten(1)  # (B, n_features * d_embedding)
        h = self.shared(x)  # (1, B, d_shared)
        return self.towers(h.expand(self.n_tasks, -1, -1))
