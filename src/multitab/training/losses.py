"""Task losses (paper, Implementation Details; docs/deviations.md S6): binary cross-entropy on logits,
cross-entropy for multiclass, MSE on the regression targets as preprocessed (raw or standardised:
docs/deviations.md S1); the multitask loss is the plain sum over tasks (no task weights, no positive-class weights)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from multitab.datasets.schema import Task


def task_loss(task: Task, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss of one task, averaged over the batch. Shapes: binary / regression output (B,), target (B,);
    multiclass output (B, n_classes), target (B,) int64. Computed in float32 (also under bf16 autocast)."""
    output = output.float()
    if task.type == "binary":
        # reshape, not squeeze: a last batch of one sample stays (1,) (their code crashed there).
        return F.binary_cross_entropy_with_logits(output.reshape(-1), target.reshape(-1).float())
    if task.type == "multiclass":
        return F.cross_entropy(output, target.reshape(-1).long())
    if task.type == "regression":
        return F.mse_loss(output.reshape(-1), target.reshape(-1).float())
    raise ValueError(f"task {task.name!r}: unknown type {task.type!r}")


class MultitaskLoss:
    """Sum over tasks of `task_loss`. Callable as `loss_fn(outputs, targets) -> (total, {task: loss})`."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            raise ValueError("a multitask loss needs at least one task")
        self.tasks = tuple(tasks)

    def per_task(
        self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        missing = [t.name for t in self.tasks if t.name not in outputs]
        if missing:
            raise KeyError(f"model outputs lack task(s) {missing}; it returned {sorted(outputs)}")
        return {t.name: task_loss(t, outputs[t.name], targets[t.name]) for t in self.tasks}

    def __call__(
        self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        parts = self.per_task(outputs, targets)
        total = torch.stack(list(parts.values())).sum()
        return total, parts
