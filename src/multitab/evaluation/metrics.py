"""The per-task metrics live in multitab.metrics, below training and the in-context runs that score with
them. This module keeps the old import path, which dvc.yaml's train and icl stages still name as a
dependency."""

from multitab.metrics import (
    binary_auc,
    explained_variance,
    mean_metric,
    mse,
    multiclass_auc,
    softmax,
    task_metric,
    task_metrics,
)

__all__ = ["binary_auc", "explained_variance", "mean_metric", "mse", "multiclass_auc", "softmax", "task_metric",
           "task_metrics"]
