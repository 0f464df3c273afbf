"""Evaluation of a trained torch model: predictions in stored order, metrics per task, MSE in target units.

Models that attend across the batch (SAINT, MultiTab-Net with inter-sample attention) see the other rows of
their batch, so predictions are made in the split's stored order in consecutive batches: reproducible. The
other models' predictions do not depend on the batch, so they may be made in larger batches
(`train.eval_batch_size`: fewer kernel launches on a GPU, the same predictions up to float rounding).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from multitab.datasets.schema import Task
from multitab.metrics import mse, task_metrics
from multitab.training.data import ProcessedData, TensorSplit, iterate_batches
from multitab.training.device import autocast

# the inter-sample layers whose outputs depend on the other rows of the batch (models/multitab_net.py)
BATCH_LAYERS = ("attention", "rope_attention")


def sees_the_batch(model: torch.nn.Module) -> bool:
    """Whether a row's outputs may depend on the other rows of its batch: an inter-sample attention layer
    anywhere in the model, or a model with its own training objective or retrieval context (MAYA)."""
    if hasattr(model, "training_loss") or hasattr(model, "fit_context"):
        return True
    return any(getattr(m, "inter_sample", None) in BATCH_LAYERS for m in model.modules())


def evaluation_batch(model: torch.nn.Module, batch_size: int, eval_batch_size: int | None) -> int:
    """The batch `model` is evaluated in: `eval_batch_size` when set and the model's rows do not see each
    other, else the training `batch_size` (the paper's)."""
    return batch_size if eval_batch_size is None or sees_the_batch(model) else eval_batch_size


@torch.inference_mode()
def predict(
    model: Callable[..., dict[str, torch.Tensor]] | torch.nn.Module,
    split: TensorSplit,
    tasks: tuple[Task, ...],
    *,
    batch_size: int,
    device: torch.device,
    precision: str = "fp32",
) -> dict[str, np.ndarray]:
    """Predictions for `split` in its stored order (consecutive batches of `batch_size`): binary and
    regression (n,), multiclass (n, n_classes) logits, as float32 numpy arrays. Each task's predictions
    are written into one array of the split's length (no list of batches joined at the end: at full size
    that held them twice); on CUDA it lives on the GPU and crosses to the host once."""
    n = len(split)
    preds: dict[str, torch.Tensor] = {}
    start = 0
    for batch in iterate_batches(split, batch_size, device=device):
        with autocast(device, precision):
            out = model(batch.x_num, batch.x_cat)
        for t in tasks:
            o = out[t.name]
            if t.name not in preds:
                preds[t.name] = torch.empty((n, *o.shape[1:]), dtype=torch.float32, device=o.device)
            preds[t.name][start : start + len(batch)] = o
        start += len(batch)
    return {t.name: preds[t.name].cpu().numpy() if t.name in preds else np.empty(0, np.float32) for t in tasks}


def _labels(split: TensorSplit) -> dict[str, np.ndarray]:
    return {k: v.cpu().numpy() for k, v in split.targets().items()}


def evaluate(
    model: torch.nn.Module,
    forward: Callable[..., dict[str, torch.Tensor]],
    data: ProcessedData,
    split_name: str,
    train_split: TensorSplit,
    *,
    batch_size: int,
    device: torch.device,
    precision: str = "fp32",
) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Metrics on one split (eval mode); returns (metrics, predictions, labels)."""
    model.eval()
    fit_context = getattr(model, "fit_context", None)
    if callable(fit_context):
        with torch.inference_mode():
            fit_context(train_split.x_num, train_split.x_cat, train_split.targets())
    split = data.splits[split_name]
    preds = predict(forward, split, data.schema.tasks, batch_size=batch_size, device=device,
                    precision=precision)
    labels = _labels(split)
    return task_metrics(data.schema.tasks, labels, preds), preds, labels


def regression_mse(
    tasks: tuple[Task, ...], labels: dict[str, np.ndarray], preds: dict[str, np.ndarray],
    target_stats: dict[str, dict[str, float]],
) -> tuple[dict[str, float], dict[str, float]]:
    """MSE per regression task in original units (via meta.json's target_stats) and standardised."""
    original, standardised = {}, {}
    for t in tasks:
        if t.type != "regression":
            continue
        standardised[t.name] = mse(labels[t.name], preds[t.name])
        stats = target_stats.get(t.name)
        if stats is None:
            raise KeyError(f"meta.json target_stats has no entry for regression task {t.name!r}")
        std, mean = float(stats["std"]), float(stats["mean"])
        original[t.name] = mse(labels[t.name].astype(np.float64) * std + mean,
                               preds[t.name].astype(np.float64) * std + mean)
    return original, standardised
