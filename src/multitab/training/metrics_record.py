"""A run's metrics record, what `stages/train.py` writes as results/runs/<dataset>/<model>/seed<S>/metrics.json:
its schema, `METRICS_SCHEMA` (JSON Schema; aggregate and the tests read it), and the fields every run writes
(`metrics_record`; multitab.training.run adds the run's settings and hyperparameters). Non-finite metric values
(an undefined AUC) are written as null.
"""

from __future__ import annotations

import math
import platform
from typing import Any

import torch

from multitab.metrics import mean_metric
from multitab.training.compute_mode import PRECISIONS
from multitab.training.data import ProcessedData
from multitab.training.loop import RunResult
from multitab.training.settings import RunSpec

_METRIC_MAP = {"type": "object", "additionalProperties": {"type": ["number", "null"]}}
METRICS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["dataset", "model", "seed", "source", "standin", "task_types", "metric_names", "test", "val",
                 "test_mean", "val_mean", "test_mse", "test_mse_standardised", "best_epoch", "epochs",
                 "max_epochs", "stopped_early", "train_seconds", "samples_per_second", "device",
                 "torch_version", "n_params", "optimizer", "n_rows"],
    "properties": {
        "dataset": {"type": "string"},
        "model": {"type": "string"},
        "seed": {"type": "integer"},
        "source": {"enum": ["standin", "local", "remote", "synthetic"]},
        "standin": {"type": "boolean"},
        "task_types": {"type": "object", "additionalProperties": {"enum": ["binary", "multiclass", "regression"]}},
        "metric_names": {"type": "object", "additionalProperties": {"enum": ["auc", "ev"]}},
        "test": _METRIC_MAP,
        "val": _METRIC_MAP,
        "test_mean": {"type": ["number", "null"]},
        "val_mean": {"type": ["number", "null"]},
        "test_mse": _METRIC_MAP,
        "test_mse_standardised": _METRIC_MAP,
        "best_epoch": {"type": "integer", "minimum": 1},
        "epochs": {"type": "integer", "minimum": 1},
        "max_epochs": {"type": "integer", "minimum": 1},
        "stopped_early": {"type": "boolean"},
        "train_seconds": {"type": "number", "minimum": 0},
        "samples_per_second": {"type": ["number", "null"]},
        "device": {"type": "string"},
        "torch_version": {"type": "string"},
        "n_params": {"type": ["integer", "null"]},
        "optimizer": {"type": "object"},
        "n_rows": {"type": "object", "additionalProperties": {"type": "integer"}},
        "precision_requested": {"enum": list(PRECISIONS)}, "precision_effective": {"enum": list(PRECISIONS)},
        "deterministic": {"type": "boolean"}, "nondeterministic_ops": {"type": "array", "items": {"type": "string"}},
        "cuda_graph": {"type": ["string", "object"]},  # with train.cuda_graph: steps replayed, or why not
    },
}


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _clean(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k: _finite_or_none(v) for k, v in metrics.items()}


def metrics_record(
    spec: RunSpec, data: ProcessedData, result: RunResult, *, optim: dict[str, Any], max_epochs: int,
    n_params: int | None,
) -> dict[str, Any]:
    meta = data.meta
    if "standin" not in meta or "source" not in meta:
        raise KeyError(f"{data.path / 'meta.json'}: keys 'source' and 'standin' are required (label stand-in results)")
    tasks = data.schema.tasks
    return {
        "dataset": spec.dataset, "model": spec.model, "seed": spec.seed,
        "source": meta["source"], "standin": bool(meta["standin"]),
        "task_types": {t.name: t.type for t in tasks},
        "metric_names": {t.name: t.metric for t in tasks},
        "test": _clean(result.test), "val": _clean(result.val),
        "test_mean": _finite_or_none(mean_metric(result.test)), "val_mean": _finite_or_none(mean_metric(result.val)),
        "test_mse": _clean(result.test_mse), "test_mse_standardised": _clean(result.test_mse_standardised),
        "best_epoch": result.best_epoch, "epochs": result.epochs, "max_epochs": max_epochs,
        "stopped_early": result.stopped_early, "resumed_from_epoch": result.resumed_from_epoch,
        "train_seconds": round(result.train_seconds, 3),
        "samples_per_second": _finite_or_none(round(result.samples_per_second, 1)),
        "device": result.device, "torch_version": torch.__version__, "python": platform.python_version(),
        "n_params": n_params, "optimizer": optim,
        "n_rows": {k: len(v) for k, v in data.splits.items()},
        # Checks of estimates that the validation policy let pass (the report's banner shows them).
        "validation_warnings": list((meta.get("validation") or {}).get("warnings", [])),
        # a declared dataset's columns left out (listed in the report)
        **({"columns_left_out": meta["declared"].get("left_out", {})} if "declared" in meta else {}),
    }
