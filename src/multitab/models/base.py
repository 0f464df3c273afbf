"""The contract every model of the registry keeps, and the wrapper for single-task models.

A model class is constructed as ``Model(*, schema: DatasetSchema, <keyword hyperparameters>)`` and is
either a torch module (``MultitaskModel``) or a non-torch estimator (XGBoost).

Torch models: ``forward(x_num, x_cat) -> dict[task name, Tensor]`` with
- x_num: float32 [B, n_num] (numerical features in schema order; [B, 0] when there are none),
- x_cat: int64 [B, n_cat] (codes 0..cardinality-1 in schema order; [B, 0] when there are none),
- outputs: binary -> logits [B]; multiclass -> logits [B, n_classes]; regression -> prediction [B]
  (in the target units of the processed data: raw or standardised, meta.json's target_transform). Keys are
  the schema's task names, in order.

Optional hooks the trainer honours (duck-typed; define them only when needed):
- ``training_loss(x_num, x_cat, targets: dict[str, Tensor], task_loss_fn) -> (loss, outputs)`` for
  models whose training loss is not the plain sum of per-task losses (MAYA's branch weights).
  ``task_loss_fn(task_name, output, target) -> scalar`` is the trainer's per-task loss.
- ``fit_context(x_num, x_cat, targets)`` called before every evaluation for models that retrieve
  from the training set at inference (MAYA's IAIL decoder).
Non-torch models (XGBoost) expose ``fit(x_num, x_cat, targets, x_num_val=..., ...)`` and
``predict(x_num, x_cat) -> dict[str, numpy array]`` (same shapes as above, probabilities or logits
as that class documents) instead of ``forward``.

A model of your own package keeps the same contract and is declared in params.yaml (`models:`, by import path;
docs/extending.md): `python -m multitab.models check package.module:Class` checks it (multitab.models.contract).
Adding a model to this package: a class with this constructor, its entry in the registry
(multitab.registry.REGISTRY), its hyperparameter files (hparams/<selection>/<dataset>/<model>.yaml,
multitab.hparams), and, for any submodule that holds parameters directly (not through nn.Linear / nn.LayerNorm /
nn.Embedding ... children), a method ``flops(inputs, output) -> MACs`` so that ``multitab.models.counting`` can count
it (it raises
otherwise). Reusable pieces: tokenizer.FeatureTokenizer / TaskTokens, blocks.TaskHeads (batched
per-task MLP heads), blocks.FeedForward, blocks.TransformerLayer, blocks.SelfAttention.

Single-task baselines (STL MLP, TabTransformer, FT-Transformer, SAINT) are one model per task behind
``PerTask``. The authors train each with its own optimizer (docs/deviations.md S9); one
Adam/AdamW over all of them on the summed loss is the same computation (per-parameter optimizer
state, disjoint parameters, each loss term reaches only its own model), unless gradients are clipped
globally.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torch import Tensor, nn

from multitab.datasets.schema import DatasetSchema, Task


def task_output_dim(task: Task) -> int:
    """Output units for a task: n_classes for multiclass, else 1."""
    if task.type == "multiclass":
        if task.n_classes is None or task.n_classes < 2:
            raise ValueError(f"multiclass task {task.name!r} needs n_classes >= 2, got {task.n_classes}")
        return task.n_classes
    if task.type not in ("binary", "regression"):
        raise ValueError(f"task {task.name!r} has unknown type {task.type!r}")
    return 1


def cat_cardinalities(schema: DatasetSchema) -> list[int]:
    cards = []
    for f in schema.features:
        if f.kind == "categorical":
            if f.cardinality is None or f.cardinality < 1:
                raise ValueError(
                    f"dataset {schema.name!r}: categorical feature {f.name!r} has no cardinality "
                    f"({f.cardinality}); fix the schema or meta.json"
                )
            cards.append(f.cardinality)
    return cards


class MultitaskModel(nn.Module):
    """Base of the torch models: holds the schema and turns a [B, sum(d_out)] block into the dict."""

    def __init__(self, *, schema: DatasetSchema) -> None:
        super().__init__()
        if not schema.tasks:
            raise ValueError(f"dataset {schema.name!r} has no tasks")
        self.schema = schema
        self.task_names = schema.task_names
        self.d_out = [task_output_dim(t) for t in schema.tasks]
        self._squeeze = [t.type != "multiclass" for t in schema.tasks]
        starts = [0]
        for d in self.d_out:
            starts.append(starts[-1] + d)
        self._slices = [slice(a, b) for a, b in zip(starts, starts[1:])]

    @property
    def n_tasks(self) -> int:
        return len(self.task_names)

    def split_outputs(self, y: Tensor) -> dict[str, Tensor]:
        """[B, sum(d_out)] -> {task: [B] or [B, n_classes]}."""
        return {
            name: y[:, s].squeeze(-1) if sq else y[:, s]
            for name, s, sq in zip(self.task_names, self._slices, self._squeeze)
        }


def module_key(name: str) -> str:
    """A task's key in an nn.ModuleDict: its name, where torch takes it (as every registry dataset's task names);
    a declared dataset's column may hold a `.` or be named as a ModuleDict attribute (`type`, `keys`), which torch
    refuses: a `.` becomes a one-dot leader (U+2024) and such a name gets one more."""
    key = name.replace(".", "\u2024")
    return key + "\u2024" if not key or hasattr(nn.ModuleDict, key) else key


def single_task_schema(schema: DatasetSchema, task: Task) -> DatasetSchema:
    return dataclasses.replace(schema, tasks=(task,))


class PerTask(MultitaskModel):
    """One single-task model per task behind the multitask interface.

    ``make(single_task_schema) -> MultitaskModel`` builds the model of one task; forward merges the
    per-task dicts. ``models[task]`` is each task's model (for per-task optimizers if wanted)."""

    def __init__(self, *, schema: DatasetSchema, make: Callable[[DatasetSchema], nn.Module]) -> None:
        super().__init__(schema=schema)
        self.models = nn.ModuleDict({module_key(t.name): make(single_task_schema(schema, t)) for t in schema.tasks})

    def forward(self, x_num: Tensor, x_cat: Tensor) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for model in self.models.values():
            out.update(model(x_num, x_cat))
        return out
