"""STL MLP: the single-task baseline of multitask learning, an independent MLP per task.

The MultiTab paper's STL baseline ("Baselines": "independent multi-layer perceptrons (MLPs) for each
task"; its code calls it st_mlp); its metrics are the reference of the multitask gain Delta_m. Inputs are
embedded per feature (FeatureTokenizer) and concatenated, as for every baseline of the paper.

Shapes follow the authors' code, so parameter counts equal theirs (docs/deviations.md, Higgs:
1,032,968 for 8 tasks at hidden [256, 128, 64], d_embedding 16; MultiTab-Bench example: 2,892,295):
hidden layers Linear -> BatchNorm -> ReLU -> Dropout, then a Linear output layer.
Initialisation is PyTorch's default, as in their code (the one baseline without N(0, 0.01^2)): Linear
layers U(+-1/sqrt(fan_in)), the numerical embedding a Linear(1, e) per feature (so U(-1, 1)), the
categorical embedding N(0, 1).
The authors train each task's MLP with its own optimizer; `PerTask` (base.py) explains why one
Adam over all of them is the same computation.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, PerTask, cat_cardinalities
from multitab.models.mlp_blocks import Towers, check_dims, check_dropout
from multitab.models.tokenizer import FeatureTokenizer


class MLP(MultitaskModel):
    """Embedding + MLP for the task(s) of `schema`, one tower each (STL uses it with one task).

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}.
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        d_hidden: Sequence[int] = (256, 128, 64),
        dropout: float = 0.0,
    ) -> None:
        super().__init__(schema=schema)
        d_hidden = check_dims("d_hidden", d_hidden)
        dropout = check_dropout(dropout)
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num, cat_cardinalities=cat_cardinalities(schema), d_embedding=d_embedding
        )
        # PyTorch's defaults for Linear(1, e) per numerical feature and nn.Embedding (see docstring).
        if self.tokenizer.num_weight is not None and self.tokenizer.num_bias is not None:
            nn.init.uniform_(self.tokenizer.num_weight, -1.0, 1.0)
            nn.init.uniform_(self.tokenizer.num_bias, -1.0, 1.0)
        if self.tokenizer.cat_embedding is not None:
            nn.init.normal_(self.tokenizer.cat_embedding.weight)
        self.towers = Towers(schema.tasks, self.tokenizer.n_tokens * d_embedding, d_hidden, dropout)

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        x = self.tokenizer(x_num, x_cat).flatten(1)  # (B, n_features * d_embedding)
        return self.towers(x.expand(self.n_tasks, -1, -1))


class STLMLP(PerTask):
    """One independent `MLP` per task behind the multitask interface (`models[task]` is task's MLP).

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] or [B, n_classes]}.

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - inside (per task): the embedded features, concatenated, ``(B, (n_num + n_cat) * d_embedding)``,
          through the MLP ``d_hidden``.
        - rows: the hidden layers' BatchNorm normalises with the batch's statistics in training mode, so
          there a row's outputs depend on the other rows of its batch (a batch of one row uses the running
          statistics); in evaluation mode each row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.stl_mlp import STLMLP
        >>> schema = get_schema("higgs")  # 17 numerical, 4 categorical (codes 0..2); binary + 7 regression
        >>> model = STLMLP(schema=schema, d_embedding=4, d_hidden=(32, 16))
        >>> _ = torch.manual_seed(0)
        >>> x_num, x_cat = torch.randn(4, schema.n_num), torch.randint(0, 3, (4, schema.n_cat))
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'target': (4,), 'm_jj': (4,), 'm_jjj': (4,), 'm_lv': (4,), 'm_jlv': (4,),
         'm_bb': (4,), 'm_wbb': (4,), 'm_wwbb': (4,)}
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        d_hidden: Sequence[int] = (256, 128, 64),
        dropout: float = 0.0,
    ) -> None:
        d_hidden = tuple(check_dims("d_hidden", d_hidden))
        dropout = check_dropout(dropout)
        super().__init__(
            schema=schema,
            make=lambda one: MLP(schema=one, d_embedding=d_embedding, d_hidden=d_hidden, dropout=dropout),
        )
