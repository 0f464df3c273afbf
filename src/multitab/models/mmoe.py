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
