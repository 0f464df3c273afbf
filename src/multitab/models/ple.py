"""PLE: Progressive Layered Extraction (Tang et al., RecSys 2020).

Stacked extraction layers (customized gate control): each task owns task-specific experts, all tasks
share shared experts; task t's gate mixes its own and the shared experts, a shared gate mixes every
expert and feeds the next layer's shared experts (`ExtractionLayer` in mlp_blocks.py). Inputs are
embedded per feature (FeatureTokenizer) and concatenated, as for every baseline of the MultiTab paper.

Shapes follow the authors' code, so parameter counts equal theirs (docs/deviations.md, Higgs:
1,221,713 at 1 task expert, 1 shared expert, 1 layer; MultiTab-Bench example: 3,118,147): each expert is
a whole MLP (`expert_d_hidden`, Linear -> BatchNorm -> ReLU -> Dropout), gates are Linear + softmax,
N(0, 0.01^2) initialisation.
# NOTE[DIFF] (docs/deviations.md D12) (from the PLE paper, kept from the authors' code): the last layer keeps
# its shared gate and each tower reads [task output, shared output] concatenated (2 * expert_d_hidden[-1]
# wide), where the PLE paper's towers read the task output alone. This is what the published parameter counts
# measure; `towers_read_shared=False` gives the paper's design (towers read task outputs, no last shared
# gate).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities
from multitab.models.mlp_blocks import ExtractionLayer, Towers, check_dims, check_dropout, init_normal_
from multitab.models.tokenizer import FeatureTokenizer


class PLE(MultitaskModel):
    """Progressive layered extraction with shared and task-specific experts.

    forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}.
    """

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int = 16,
        n_layers: int = 1,
        n_task_experts: int = 1,
        n_shared_experts: int = 1,
        expert_d_hidden: Sequence[int] = (256, 128),
        tower_d_hidden: Sequence[int] = (64,),
        dropout: float = 0.0,
        towers_read_shared: bool = True,
    ) -> None:
        super().__init__(schema=schema)
        if n_layers < 1:
            raise ValueError(f"{n_layers=} must be >= 1")
        if n_task_experts < 0 or n_shared_experts < 1:
            raise ValueError(f"{n_task_experts=} must be >= 0 and {n_shared_experts=} >= 1")
        expert_d_hidden = check_dims("expert_d_hidden", expert_d_hidden)
        tower_d_hidden = check_dims("tower_d_hidden", tower_d_hidden, allow_empty=True)
        dropout = check_dropout(dropout)
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num, cat_cardinalities=cat_cardinalities(schema), d_embedding=d_embedding
        )
        d_in = self.tokenizer.n_tokens * d_embedding
        self.layers = nn.ModuleList(
            ExtractionLayer(
                n_tasks=self.n_tasks,
                n_task_experts=n_task_experts,
                n_shared_experts=n_shared_experts,
                d_in=d_in if i == 0 else expert_d_hidden[-1],
                d_hidden=expert_d_hidden,
                dropout=dropout,
                shared_gate=towers_read_shared or i < n_layers - 1,
                gate_all_experts=False,
            )
            for i in range(n_layers)
        )
        self.towers_read_shared = towers_read_shared
        d_tower = (2 if towers_read_shared else 1) * expert_d_hidden[-1]
        self.towers = Towers(schema.tasks, d_tower, tower_d_hidden, dropout)
        init_normal_(self)

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        h = self.tokenizer(x_num, x_cat).flatten(1)  # (B, n_features * d_embedding), the same for all
        for layer in self.layers:
            h = layer(h)  # (n_tasks + 1, B, d_expert)
        if not self.towers_read_shared:
            return self.towers(h)  # (n_tasks, B, d_expert): the papers' towers
        return self.towers(torch.cat([h[:-1], h[-1:].expand(self.n_tasks, -1, -1)], dim=-1))
