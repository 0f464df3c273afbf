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

from multitab.datasets.schema import DatasetSchema
from multitab.models._extraction import ExtractionModel


class PLE(ExtractionModel):
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
        super().__init__(
            schema=schema, d_embedding=d_embedding, n_layers=n_layers, n_task_experts=n_task_experts,
            n_shared_experts=n_shared_experts, expert_d_hidden=expert_d_hidden, tower_d_hidden=tower_d_hidden,
            dropout=dropout, towers_read_shared=towers_read_shared, task_embeddings=False, gate_all_experts=False,
            min_task_experts=0,
        )
