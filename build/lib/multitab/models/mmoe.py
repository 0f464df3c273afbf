"""MMoE: Multi-gate Mixture-of-Experts (Ma et al., KDD 2018).

Every expert is an MLP over the embedded inputs; each task has its own softmax gate over the experts
(a linear layer of the same input) and its own MLP tower reading the gated mixture:
    f_t(x) = sum_i softmax(W_t x)_i * expert_i(x),    y_t = tower_t(f_t(x)).
The MultiTab paper uses 8 experts ("Implementation Details"). Inputs are embedded per feature
(FeatureTokenizer) and concatenated, as for every baseline of the paper.

Shapes follow the authors' code, so parameter counts equal theirs (docs/deviations.md, Higgs:
1,049,384; MultiTab-Bench example: 1,408,831): experts Linear -> BatchNorm -> ReLU -> Dropout per hidden
layer, gates a plain Linear + softmax, towers with BatchNorm; N(0, 0.01^2) initialisation.
The experts run as one batched matrix product, the gates as one Linear of width n_tasks * n_experts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities
from multitab.models.mlp_blocks import BatchedMLP, Towers, check_dims, check_dropout, init_normal_
from multitab.models.tokenizer import FeatureTokenizer


class MMoE(MultitaskModel):
    """Multi-gate mixture of experts.

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}. `gate_weights(x_num, x_cat)` -> [n_tasks, B, n_experts].

    Shape:
        - ``x_num``: ``(B, n_num)``, float32, the numerical features in schema order (``(B, 0)`` if none).
        - ``x_cat``: ``(B, n_cat)``, int64, the categorical codes in schema order, column j in
          ``0 .. cardinality_j - 1`` of the schema the model was built with (in processed data code 0 is
          reserved for values unseen in train); ``(B, 0)`` if none.
        - output: ``{task: Tensor}`` in the schema's task order, float32: ``(B,)`` for a binary task
          (logits) or a regression task (predictions), ``(B, C)`` for a C-class task (logits).
        - ``gate_weights(x_num, x_cat)``: ``(n_tasks, B, n_experts)``, each task's softmax over the experts.
        - inside: the embedded features, concatenated, ``(B, (n_num + n_cat) * d_embedding)``; the experts
          give ``(n_experts, B, expert_d_hidden[-1])``, the gated mixtures
          ``(n_tasks, B, expert_d_hidden[-1])``.
        - rows: the hidden layers' BatchNorm normalises with the batch's statistics in training mode, so
          there a row's outputs depend on the other rows of its batch (a batch of one row uses the running
          statistics); in evaluation mode each row's outputs depend on that row alone.

    Examples:
        >>> import torch
        >>> from multitab.datasets.schema import get_schema
        >>> from multitab.models.mmoe import MMoE
        >>> schema = get_schema("higgs")  # 17 numerical, 4 categorical (codes 0..2); binary + 7 regression
        >>> model = MMoE(schema=schema, d_embedding=4, n_experts=3, expert_d_hidden=(32, 16),
        ...              tower_d_hidden=(8,))
        >>> _ = torch.manual_seed(0)
        >>> x_num, x_cat = torch.randn(4, schema.n_num), torch.randint(0, 3, (4, schema.n_cat))
        >>> {name: tuple(y.shape) for name, y in model(x_num, x_cat).items()}  # doctest: +NORMALIZE_WHITESPACE
        {'target': (4,), 'm_jj': (4,), 'm_jjj': (4,), 'm_lv': (4,), 'm_jlv': (4,),
         'm_bb': (4,), 'm_wbb': (4,), 'm_wwbb': (4,)}
        >>> tuple(model.gate_weights(x_num, x_cat).shape)  # 8 tasks, 4 rows, 3 experts
        (8, 4, 3)
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        n_experts: int = 8,
        expert_d_hidden: Sequence[int] = (256, 128),
        tower_d_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
    ) -> None:
        super().__init__(schema=schema)
        if n_experts < 1:
            raise ValueError(f"{n_experts=} must be >= 1")
        expert_d_hidden = check_dims("expert_d_hidden", expert_d_hidden)
        tower_d_hidden = check_dims("tower_d_hidden", tower_d_hidden, allow_empty=True)
        dropout = check_dropout(dropout)
        self.n_experts = n_experts
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num, cat_cardinalities=cat_cardinalities(schema), d_embedding=d_embedding
        )
        d_in = self.tokenizer.n_tokens * d_embedding
        self.experts = BatchedMLP(n_experts, d_in, expert_d_hidden, dropout)
        self.gates = nn.Linear(d_in, self.n_tasks * n_experts)  # = one Linear(d_in, n_experts) per task
        self.towers = Towers(schema.tasks, expert_d_hidden[-1], tower_d_hidden, dropout)
        init_normal_(self)

    def _gates(self, x: Tensor) -> Tensor:
        logits = self.gates(x).view(x.shape[0], self.n_tasks, self.n_experts)
        return torch.softmax(logits, dim=-1).transpose(0, 1)  # (n_tasks, B, n_experts)

    def gate_weights(self, x_num: Tensor, x_cat: Tensor) -> Tensor:
        return self._gates(self.tokenizer(x_num, x_cat).flatten(1))

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        x = self.tokenizer(x_num, x_cat).flatten(1)  # (B, n_features * d_embedding)
        experts = self.experts(x)  # (n_experts, B, d_expert)
        # (n_tasks, B, n_experts) @ (B, n_experts, d_expert) per sample -> (n_tasks, B, d_expert)
        mixed = torch.einsum("tbe,ebd->tbd", self._gates(x), experts)
        return self.towers(mixed)
