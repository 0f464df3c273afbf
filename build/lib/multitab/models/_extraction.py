"""The private base of PLE and STEM: per-feature embeddings, a stack of extraction layers
(`ExtractionLayer`, mlp_blocks.py) and one tower per task. The two models differ in what the base takes as
arguments: how many embeddings of the inputs there are (PLE one for all; STEM one per task plus a shared
one), which experts a task gate mixes (PLE its own and the shared ones; STEM all, with stop-gradient) and
the least number of task experts."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema
from multitab.models.base import MultitaskModel, cat_cardinalities
from multitab.models.mlp_blocks import ExtractionLayer, Towers, check_dims, check_dropout, init_normal_
from multitab.models.tokenizer import FeatureTokenizer


class ExtractionModel(MultitaskModel):
    """forward(x_num [B, n_num] float, x_cat [B, n_cat] long) -> {task: [B] (binary logits, regression) or
    [B, n_classes] (multiclass logits)}.

    `task_embeddings`: False, one embedding read by every expert and gate (PLE); True, task t's experts
    and gate read task t's embedding and the shared experts a shared one (STEM), all T + 1 embeddings
    held by one FeatureTokenizer of width (T + 1) * d_embedding and split afterwards (the same parameters
    and function as T + 1 tokenizers in one op)."""

    def __init__(
        self,
        *,
        schema: DatasetSchema,
        d_embedding: int,
        n_layers: int,
        n_task_experts: int,
        n_shared_experts: int,
        expert_d_hidden: Sequence[int],
        tower_d_hidden: Sequence[int],
        dropout: float,
        towers_read_shared: bool,
        task_embeddings: bool,
        gate_all_experts: bool,
        min_task_experts: int,
        stop_gradient_shared: bool = False,
    ) -> None:
        super().__init__(schema=schema)
        if n_layers < 1:
            raise ValueError(f"{n_layers=} must be >= 1")
        if n_task_experts < min_task_experts or n_shared_experts < 1:
            raise ValueError(f"{n_task_experts=} must be >= {min_task_experts} and {n_shared_experts=} >= 1")
        expert_d_hidden = check_dims("expert_d_hidden", expert_d_hidden)
        tower_d_hidden = check_dims("tower_d_hidden", tower_d_hidden, allow_empty=True)
        dropout = check_dropout(dropout)
        self.d_embedding = d_embedding
        self.n_embeddings = self.n_tasks + 1 if task_embeddings else 1
        self.tokenizer = FeatureTokenizer(
            n_num=schema.n_num,
            cat_cardinalities=cat_cardinalities(schema),
            d_embedding=self.n_embeddings * d_embedding,
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
                gate_all_experts=gate_all_experts,
                stop_gradient_shared=stop_gradient_shared,
            )
            for i in range(n_layers)
        )
        self.towers_read_shared = towers_read_shared
        d_tower = (2 if towers_read_shared else 1) * expert_d_hidden[-1]
        self.towers = Towers(schema.tasks, d_tower, tower_d_hidden, dropout)
        init_normal_(self)

    def embed(self, x_num: Tensor, x_cat: Tensor) -> Tensor:
        """-> [B, n_features * d_embedding] (one embedding), or [n_tasks + 1, B, n_features * d_embedding]
        (task t's embedding at t, the shared one last)."""
        tokens = self.tokenizer(x_num, x_cat)  # (B, n_features, n_embeddings * d)
        if self.n_embeddings == 1:
            return tokens.flatten(1)
        b, f, _ = tokens.shape
        return (
            tokens.view(b, f, self.n_embeddings, self.d_embedding)
            .permute(2, 0, 1, 3)
            .reshape(self.n_embeddings, b, -1)
        )

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        h = self.embed(x_num, x_cat)
        for layer in self.layers:
            h = layer(h)  # (n_tasks + 1, B, d_expert)
        if not self.towers_read_shared:
            return self.towers(h)  # (n_tasks, B, d_expert): the papers' towers
        return self.towers(torch.cat([h[:-1], h[-1:].expand(self.n_tasks, -1, -1)], dim=-1))
