"""TwoExpertMMoE: a multi-gate mixture of two experts with a gate temperature, the example of a user's own model
(examples/own_model/README.md). It keeps multitab's model contract (multitab/models/base.py): built as
`TwoExpertMMoE(schema=..., <keywords>)`, it maps `(x_num [B, n_num] float, x_cat [B, n_cat] long)` to one output
per task of the schema, in its order: binary logits [B], multiclass logits [B, n_classes], regression [B].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from multitab.models.base import MultitaskModel, cat_cardinalities


def _mlp(d_in: int, widths: Sequence[int], dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(d_in, width), nn.LayerNorm(width), nn.ReLU(), nn.Dropout(dropout)]
        d_in = width
    return nn.Sequential(*layers)


class TwoExpertMMoE(MultitaskModel):
    """Two expert MLPs shared by every task; each task mixes them with its own softmax gate, sharpened or flattened
    by `gate_temperature`, and reads the mixture with its own tower.

    Shape:
        x_num (B, n_num) float32 and x_cat (B, n_cat) int64 in; {task: (B,) or (B, C)} out, in task order. Each
        row's outputs depend on that row alone (LayerNorm, no batch statistics).
    """

    def __init__(self, *, schema: Any, d_embedding: int, expert_d_hidden: Sequence[int], tower_d_hidden: int,
                 dropout: float, gate_temperature: float) -> None:
        super().__init__(schema=schema)
        if gate_temperature <= 0:
            raise ValueError(f"gate_temperature={gate_temperature} must be > 0")
        cards = cat_cardinalities(schema)
        self.numerical = nn.Linear(schema.n_num, schema.n_num * d_embedding) if schema.n_num else None
        self.categorical = nn.ModuleList(nn.Embedding(card, d_embedding) for card in cards)
        d_in = (schema.n_num + len(cards)) * d_embedding
        self.experts = nn.ModuleList(_mlp(d_in, expert_d_hidden, dropout) for _ in range(2))
        self.gates = nn.Linear(d_in, self.n_tasks * 2)
        self.towers = nn.ModuleList(
            nn.Sequential(nn.Linear(expert_d_hidden[-1], tower_d_hidden), nn.ReLU(), nn.Linear(tower_d_hidden, d))
            for d in self.d_out)
        self.temperature = gate_temperature

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        parts = [self.numerical(x_num)] if self.numerical is not None else []
        parts += [embedding(x_cat[:, j]) for j, embedding in enumerate(self.categorical)]
        x = torch.cat(parts, dim=1)
        experts = torch.stack([expert(x) for expert in self.experts])  # (2, B, d)
        gates = torch.softmax(self.gates(x).view(len(x), self.n_tasks, 2) / self.temperature, dim=-1)  # (B, T, 2)
        mixed = torch.einsum("bte,ebd->tbd", gates, experts)  # (T, B, d)
        return self.split_outputs(torch.cat([tower(m) for tower, m in zip(self.towers, mixed)], dim=1))
