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

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - inside: the embedded features, concatenated, ``(B, (n_num + n_cat) * d_embedding)``; the shared
          bottom gives ``(B, shared_d_hidden[-1])``, which every task's tower reads.
        - rows: the hidden layers' BatchNorm normalises with the batch's statistics in training mode, so
          there a row's outputs depend on the other rows of its batch (a batch of one row uses the running
          statistics); in evaluation mode each row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.base import cat_cardinalities
        >>> from multitab.models.mtl_shared_bottom import MTLSharedBottom
        >>> schema = get_schema("acs_income")  # 10 categorical features, no numerical; binary + 5-class task
        >>> model = MTLSharedBottom(schema=schema, d_embedding=4, shared_d_hidden=(32, 16),
        ...                         tower_d_hidden=(8,))
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
