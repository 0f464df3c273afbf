"""Per-task metrics, as in the paper's "Evaluation Metrics" section, computed with scikit-learn. Training
and the in-context runs score with them (so they sit below both, and below multitab.evaluation).

- binary: ROC AUC of the positive-class score (logits are fine: AUC is invariant to monotone maps);
- multiclass: macro one-vs-rest ROC AUC of the softmax probabilities (the 5-class ACS `marital` task);
- regression: explained variance (the paper's metric) and MSE.

The early-stopping criterion is `mean_metric`: the mean over tasks of AUC / EV (paper, Implementation
Details: both are bounded by 1, so one mean serves every dataset).

MSE units. `mse` is computed on whatever scale the caller passes. Training sees the regression targets
as preprocessed (raw by default, or standardised with train mean / std); the stage reports `test_mse` in the
ORIGINAL target units (predictions and targets mapped back with meta.json's target_stats) and
`test_mse_standardised` beside it. Why original units: the paper's Table 10 (Higgs) does not fit
standardised targets. On standardised targets
MSE ≈ 1 - EV, but Table 10 pairs e.g. m_jjj EV 0.324 with MSE 0.300 and m_bb EV 0.992 with MSE 0.0002,
which imply target standard deviations of ≈ 0.67 and ≈ 0.16: the raw scale of Higgs' high-level
features (values around 1), not unit variance. EV is the same on both scales.

Undefined AUCs. A split can hold a single class of a rare task (AliExpress `conversion` has 0.07 %
positives: a small stand-in's validation split may have none). Then the binary AUC is undefined and is
reported as NaN (JSON null) with a warning; a multiclass macro AUC averages over the classes that have
both positives and negatives. `mean_metric` averages the defined task metrics only.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from multitab.datasets.schema import Task

log = logging.getLogger(__name__)


def binary_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC; NaN (with a warning) when `y_true` holds a single class."""
    y_true = np.asarray(y_true).reshape(-1)
    if np.unique(y_true).size < 2:
        log.warning("AUC undefined: only class %s present in %d labels; reported as NaN",
                    np.unique(y_true).tolist(), y_true.size)
        return math.nan
    # imported here, not at the top: sklearn costs seconds of every training stage's start-up
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y_true, np.asarray(score, dtype=np.float64).reshape(-1)))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def multiclass_auc(y_true: np.ndarray, logits: np.ndarray) -> float:
    """Macro one-vs-rest ROC AUC of the softmax probabilities of `logits` (n, n_classes). The softmax
    matters: class k's probability is not a monotone function of logit k alone. Equals sklearn's
    `roc_auc_score(y, softmax(logits), multi_class="ovr", average="macro")` when every class occurs;
    classes absent from `y_true` are left out of the mean (sklearn would raise)."""
    y_true = np.asarray(y_true).reshape(-1)
    score = np.asarray(logits, dtype=np.float64)
    if score.ndim != 2 or score.shape[0] != y_true.shape[0]:
        raise ValueError(f"multiclass scores must be (n, n_classes) with n={y_true.shape[0]}, got {score.shape}")
    from sklearn.metrics import roc_auc_score

    score = softmax(score)
    aucs = []
    for k in range(score.shape[1]):
        positives = y_true == k
        if positives.all() or not positives.any():
            continue
        aucs.append(roc_auc_score(positives, score[:, k]))
    if len(aucs) < score.shape[1]:
        log.warning("macro AUC over %d of %d classes (the others are absent from the labels)",
                    len(aucs), score.shape[1])
    return float(np.mean(aucs)) if aucs else math.nan


def _column(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).reshape(-1, 1)


def explained_variance(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """1 - Var(y - ŷ) / Var(y), computed as sklearn's `explained_variance_score` does (same operations,
    same result; 1.0 for a constant target predicted exactly, 0.0 for any other constant target), without
    importing sklearn, which costs seconds of every training stage's start-up."""
    y, p = _column(y_true), _column(y_pred)
    if y.shape != p.shape:
        raise ValueError(f"explained variance: {y.shape[0]} labels but {p.shape[0]} predictions")
    diff_avg = np.average(y - p, axis=0)
    numerator = np.average((y - p - diff_avg) ** 2, axis=0)
    denominator = np.average((y - np.average(y, axis=0)) ** 2, axis=0)
    if denominator[0] == 0.0:
        return 1.0 if numerator[0] == 0.0 else 0.0
    return float(1.0 - numerator[0] / denominator[0])


def mse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean squared error (as sklearn's `mean_squared_error`)."""
    y, p = _column(y_true), _column(y_pred)
    if y.shape != p.shape:
        raise ValueError(f"MSE: {y.shape[0]} labels but {p.shape[0]} predictions")
    return float(np.average((y - p) ** 2, axis=0)[0])


def task_metric(task: Task, y_true: np.ndarray, pred: np.ndarray) -> float:
    """The paper's metric of one task: AUC (binary), macro OvR AUC (multiclass), EV (regression)."""
    if task.type == "binary":
        return binary_auc(y_true, pred)
    if task.type == "multiclass":
        return multiclass_auc(y_true, pred)
    if task.type == "regression":
        return explained_variance(y_true, pred)
    raise ValueError(f"task {task.name!r}: unknown type {task.type!r}")


def task_metrics(
    tasks: Sequence[Task], y_true: Mapping[str, np.ndarray], preds: Mapping[str, np.ndarray]
) -> dict[str, float]:
    """{task: metric} for every task; `preds[task]` as the model returns it (logits / values)."""
    missing = [t.name for t in tasks if t.name not in preds or t.name not in y_true]
    if missing:
        raise KeyError(f"no predictions or labels for task(s) {missing}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        return {t.name: task_metric(t, y_true[t.name], preds[t.name]) for t in tasks}


def mean_metric(metrics: Mapping[str, float]) -> float:
    """Mean over tasks of the defined (finite) metrics; NaN when none is defined."""
    values = [v for v in metrics.values() if math.isfinite(v)]
    return float(np.mean(values)) if values else math.nan
