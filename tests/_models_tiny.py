"""Tiny configurations, schema and batches shared by the model tests (test_model_contract.py and the
per-family test files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from multitab.datasets.schema import SCHEMAS, DatasetSchema, Feature, RawColumn, Task
from multitab.hparams import BENCH, load
from multitab.models import MODELS, as_schema, build_model, hyperparameters
from multitab.models.contract import batch as batch  # the model contract's own batches and losses
from multitab.models.contract import task_loss
from multitab.models.multitab_net import INTER_SAMPLE
from multitab.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
# each registered torch model's tiny configuration, from its registry entry (multitab.registry)
TINY: dict[str, dict[str, Any]] = {name: dict(e.tiny) for name, e in REGISTRY.items() if e.tiny is not None}
OWN_TESTS = {"xgboost": "tests/test_xgboost.py"}
TORCH_MODELS = [n for n, cls in MODELS.items() if isinstance(cls, type) and issubclass(cls, nn.Module)]
# (registry name, overrides): every torch model, and the variants with code paths of their own
CASES: list[tuple[str, dict[str, Any]]] = [
    *[(name, {}) for name in TORCH_MODELS],
    *[("multitab_net", {"inter_sample": m, "mask": "t_t"}) for m in INTER_SAMPLE],
    ("multitab_net", {"multi_token": False, "mask": "f_t", "inter_sample": "attention"}),
    ("saint", {"inter_sample": "attention"}),
    ("saint", {"inter_sample": "per_sample_mixing"}),
    ("ft_transformer", {"backbone": "rtdl"}),
    ("ple", {"towers_read_shared": False}),
    ("stem", {"towers_read_shared": False}),
    ("stem", {"stop_gradient_shared": True}),  # with towers_read_shared=False the shared gates get no gradient
]
IDS = [f"{n}-{'-'.join(str(v) for v in o.values()) or 'default'}" for n, o in CASES]


def make_schema(n_num: int = 3, cards: tuple[int, ...] = (4, 3)) -> DatasetSchema:
    feats = tuple(Feature(f"n{i}", "numerical") for i in range(n_num)) + tuple(
        Feature(f"c{i}", "categorical", cardinality=c) for i, c in enumerate(cards)
    )
    tasks = (
        Task("b", "binary", column="b"),
        Task("m", "multiclass", column="m", n_classes=3),
        Task("r", "regression", column="r"),
    )
    raw = tuple(RawColumn(f.name, "float", "feature") for f in feats)
    return DatasetSchema(name="tiny", raw_columns=raw, features=feats, tasks=tasks)


SCHEMA = make_schema()


def loss_and_outputs(model: nn.Module, x_num: Tensor, x_cat: Tensor, y: dict[str, Tensor]) -> tuple[Tensor, Any]:
    """The training loss as the trainer computes it: the model's own `training_loss` hook (MAYA) or the
    sum of the task losses."""
    if hasattr(model, "training_loss"):
        return model.training_loss(x_num, x_cat, y, task_loss)  # type: ignore[operator,no-any-return]
    out = model(x_num, x_cat)
    return sum(task_loss(k, v, y[k]) for k, v in out.items()), out  # type: ignore[return-value]


def predict(model: nn.Module, x_num: Tensor, x_cat: Tensor, context: tuple[Any, ...]) -> dict[str, Tensor]:
    """Evaluation-mode outputs, after the `fit_context` hook (MAYA attends to the training set)."""
    if hasattr(model, "fit_context"):
        model.fit_context(*context)  # type: ignore[operator]
    return model(x_num, x_cat)  # type: ignore[no-any-return]


def dropout(name: str, p: float) -> dict[str, float]:
    """Keywords that switch on every dropout site of a model."""
    hp = hyperparameters(name)
    return {k: p for k in ("attention_dropout", "ffn_dropout", "dropout") if k in hp}


def build_authors(name: str, schema: DatasetSchema, protocol: str = "authors_code", **overrides: Any) -> Any:
    """`name` built with its authors' hyperparameter file (hparams/authors/: the schema's dataset, or the
    MultiTab-Bench example's for any other schema) under `protocol`, `overrides` laid over it."""
    schema = as_schema(schema)
    folder = schema.name if schema.name in SCHEMAS else BENCH
    return build_model(name, schema, {**load(folder, name, protocol=protocol, root=ROOT).model, **overrides})


def build(name: str, overrides: dict[str, Any], schema: DatasetSchema = SCHEMA, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return build_authors(name, schema, **{**TINY[name], **overrides})
