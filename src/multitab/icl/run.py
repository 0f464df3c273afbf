"""One evaluation of a pretrained in-context model on a processed dataset: every task on its own (these are
single-task models), the context a seeded sample of the training rows, scored on val and test with the
project's metrics. Features: numerical columns then categorical codes, as plain numbers.

The record says what produced it: the checkpoint's file and sha256, the context rule and size, the chunk
size, the ensemble size, the Orion-MSP switches, "pretrained, no training on this dataset". A task the model
cannot do (Orion-MSP: regression) is "not applicable"; a model without a checkpoint is "not run: no
checkpoint" for every task. Neither ever has a number."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multitab.config.icl import IclConfig
from multitab.datasets.schema import Task
from multitab.evaluation.metrics import mean_metric, task_metrics
from multitab.icl import checkpoint as ckpt
from multitab.icl import context, tabicl_model
from multitab.icl.orion_msp import from_checkpoint
from multitab.training.data import load_processed

log = logging.getLogger(__name__)

NOT_RUN = "not run: no checkpoint"
NOT_APPLICABLE = "not applicable"
PRETRAINED = "pretrained, no training on this dataset"


def _features(split: Any) -> np.ndarray:
    return np.concatenate([split.x_num.numpy(), split.x_cat.numpy().astype(np.float32)], axis=1)


def _classifier_scores(proba: np.ndarray, present: np.ndarray, n_classes: int) -> np.ndarray:
    """Log-probabilities over all `n_classes` from probabilities over the classes `present` in the context
    (an absent class gets probability 0, log -inf clipped to -1e4)."""
    full = np.zeros((len(proba), n_classes))
    full[:, present] = proba
    return np.log(np.maximum(full, 1e-30)).clip(min=-1e4)


def _on_device(net: torch.nn.Module, device: torch.device) -> context.Logits:
    def logits(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = net(x.to(device), y.to(device))
        return out.cpu()

    return logits


def _checkpoint_for(model: str, task: Task, config: IclConfig) -> tuple[str, Any]:
    name = "tabicl_regressor" if model == "tabicl" and task.type == "regression" else model
    return name, config.checkpoints.get(name)


def evaluate(data_dir: str | Path, *, model: str, seed: int, config: IclConfig, root: Path = Path(".")) -> dict[str, Any]:
    """The metrics record of `model` on the processed dataset in `data_dir` (see module docstring)."""
    data = load_processed(data_dir, splits=())  # meta.json: the tasks
    runs = any(not (model == "orion_msp" and t.type == "regression")
               and (entry := _checkpoint_for(model, t, config)[1]) is not None and entry.path is not None
               for t in data.schema.tasks)
    if not runs:  # nothing to predict: no split is read
        return _record(data.meta.get("dataset", Path(data_dir).name), model, seed, config, {
            t.name: NOT_APPLICABLE if model == "orion_msp" and t.type == "regression" else NOT_RUN
            for t in data.schema.tasks}, {"val": {}, "test": {}}, {}, None, 0.0)
    data = load_processed(data_dir)
    train, splits = data.splits["train"], {s: data.splits[s] for s in ("val", "test")}
    rows = context.context_rows(len(train), config.context_size, seed)
    x_context = _features(train)[rows]
    targets = {name: v.numpy()[rows] for name, v in train.targets().items()}
    status: dict[str, str] = {}
    metrics: dict[str, dict[str, float]] = {"val": {}, "test": {}}
    checkpoints: dict[str, str] = {}
    seconds = 0.0
    device = torch.device(config.device)
    net: torch.nn.Module | None = None
    dataset = data.meta.get("dataset", Path(data_dir).name)
    predicted = sum(len(d) for d in splits.values())
    for task in data.schema.tasks:
        if model == "orion_msp" and task.type == "regression":
            status[task.name] = NOT_APPLICABLE
            continue
        name, entry = _checkpoint_for(model, task, config)
        if entry is None or entry.path is None:
            status[task.name] = NOT_RUN
            continue
        path = root / entry.path
        y = targets[task.name]
        t0 = time.perf_counter()
        if task.type == "regression":
            estimator, checkpoints[name] = tabicl_model.build("regressor", path=path, sha256=entry.sha256,
                                                              n_estimators=config.n_estimators, seed=seed,
                                                              device=config.device)
            estimator.fit(x_context, y)
            preds = {s: np.asarray(estimator.predict(_features(d)), np.float64) for s, d in splits.items()}
        else:
            present, codes = np.unique(y.astype(np.int64), return_inverse=True)
            n_classes = 2 if task.type == "binary" else int(task.n_classes or present.max() + 1)
            if model == "orion_msp":
                if net is None:  # one load for all of the dataset's tasks
                    loaded, checkpoints[name] = ckpt.load(path, entry.sha256)
                    try:
                        net = from_checkpoint(loaded, window=config.orion.window, memory=config.orion.memory,
                                              links=config.orion.links, link_seed=config.orion.link_seed)
                    except (ValueError, RuntimeError) as e:  # its config or weights are not Orion-MSP's
                        raise ckpt.CheckpointError(f"checkpoint {path}: {' '.join(str(e).split())[:300]}") from e
                    net = net.to(device)
                ensemble = context.OrionMSPEnsemble(_on_device(net, device),
                                                    n_estimators=config.n_estimators, seed=seed,
                                                    chunk_size=config.chunk_size)
                proba = {s: ensemble.predict_proba(x_context, codes, _features(d)) for s, d in splits.items()}
            else:
                estimator, checkpoints[name] = tabicl_model.build("classifier", path=path, sha256=entry.sha256,
                                                                  n_estimators=config.n_estimators, seed=seed,
                                                                  device=config.device)
                estimator.fit(x_context, codes)
                proba = {s: np.asarray(estimator.predict_proba(_features(d)), np.float64) for s, d in splits.items()}
            scores = {s: _classifier_scores(p, present, n_classes) for s, p in proba.items()}
            # binary tasks are scored by a logit: log p1 - log p0
            preds = {s: (v[:, 1] - v[:, 0]) if task.type == "binary" else v for s, v in scores.items()}
        task_seconds = time.perf_counter() - t0
        seconds += task_seconds
        log.info("%s %s seed %d, task %s: %d val+test rows predicted from %d context rows x %d view(s) in %.1f s",
                 dataset, model, seed, task.name, predicted, len(rows), config.n_estimators, task_seconds)
        for s, d in splits.items():
            metrics[s] |= task_metrics([task], {task.name: d.targets()[task.name].numpy()}, {task.name: preds[s]})
        status[task.name] = "ok"
    return _record(dataset, model, seed, config, status, metrics, checkpoints, (len(rows), len(train)), seconds)


def _record(dataset: str, model: str, seed: int, config: IclConfig, status: dict[str, str],
            metrics: dict[str, dict[str, float]], checkpoints: dict[str, str], rows: tuple[int, int] | None,
            seconds: float) -> dict[str, Any]:
    return {
        "dataset": dataset, "model": model, "seed": seed, "kind": PRETRAINED,
        "status": status, "val": metrics["val"], "test": metrics["test"],
        "val_mean": mean_metric(metrics["val"]) if metrics["val"] else math.nan,
        "test_mean": mean_metric(metrics["test"]) if metrics["test"] else math.nan,
        "checkpoints": {name: {"path": config.checkpoints[name].path, "sha256": sha}
                        for name, sha in checkpoints.items()},
        "context": {"rule": config.context_rule, "size": config.context_size,
                    "rows_used": rows[0] if rows else None, "train_rows": rows[1] if rows else None},
        "chunk_size": config.chunk_size, "n_estimators": config.n_estimators,
        "orion": dataclasses.asdict(config.orion) if model == "orion_msp" else None,
        "seconds": seconds, "device": config.device,
    }
