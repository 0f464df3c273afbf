"""Predictions of a trained model on one split (batched, in the split's stored order, bf16 autocast on
CUDA when asked) and the regression MSE in original and standardised units."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from multitab.datasets.schema import Task
from multitab.evaluation.metrics import mse
from multitab.training.data import TensorSplit, iterate_batches


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "bf16" and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


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
    regression (n,), multiclass (n, n_classes) logits, as float32 numpy arrays."""
    parts: dict[str, list[torch.Tensor]] = {t.name: [] for t in tasks}
    for batch in iterate_batches(split, batch_size, device=device):
        with _autocast(device, precision):
            out = model(batch.x_num, batch.x_cat)
        for t in tasks:
            parts[t.name].append(out[t.name].float())
    return {name: torch.cat(p).cpu().numpy() if p else np.empty(0, np.float32) for name, p in parts.items()}


def _labels(split: TensorSplit) -> dict[str, np.ndarray]:
    return {k: v.cpu().numpy() for k, v in split.targets().items()}


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
