"""One evaluation of a pretrained in-context model on a processed dataset (data/processed/<dataset>, or a
MultiTab-Bench configuration's data/synthetic/<config>): every task on its own (these are single-task
models), the context a seeded sample of the training rows, scored on val and test with the project's
metrics. Features: numerical columns then categorical codes, as plain numbers.

How much of the released settings a run affords is its profile (params `icl.profiles`, picked by device):
context size, test rows per call, ensemble views. Orion-MSP encodes each view's context once for all of a
dataset's tasks and both splits (context.OrionMSPEnsemble); TabICL predicts val and test in one call, so
its package encodes the context once per task.

The record says what produced it: the profile and device, the checkpoints' files and sha256 (icl.lock),
the context rule and size, the chunk size, the ensemble size, the Orion-MSP switches, "pretrained, no
training on this dataset". A task the model cannot do (Orion-MSP: regression) is "not applicable"; a model
without a checkpoint is "not run: no checkpoint" for every task. Neither ever has a number."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multitab.config.icl import IclConfig, IclProfile
from multitab.datasets.schema import Task
from multitab.icl import context, tabicl_model
from multitab.icl.estimator import load_orion
from multitab.metrics import mean_metric, task_metrics
from multitab.training.data import load_processed

log = logging.getLogger(__name__)

NOT_RUN = "not run: no checkpoint"
NOT_APPLICABLE = "not applicable"
PRETRAINED = "pretrained, no training on this dataset"

# a checkpoint name -> its file and pinned sha256, or why there is none (multitab.icl.lock.checkpoint)
Checkpoints = Mapping[str, "tuple[Path, str] | str"]


def _features(split: Any) -> np.ndarray:
    return np.concatenate([split.x_num.numpy(), split.x_cat.numpy().astype(np.float32)], axis=1)


def _classifier_scores(proba: np.ndarray, present: np.ndarray, n_classes: int) -> np.ndarray:
    """Log-probabilities over all `n_classes` from probabilities over the classes `present` in the context
    (an absent class gets probability 0, log -inf clipped to -1e4)."""
    full = np.zeros((len(proba), n_classes))
    full[:, present] = proba
    return np.log(np.maximum(full, 1e-30)).clip(min=-1e4)


def checkpoint_name(model: str, task: Task) -> str:
    return "tabicl_regressor" if model == "tabicl" and task.type == "regression" else model


def _applicable(model: str, task: Task) -> bool:
    return not (model == "orion_msp" and task.type == "regression")


def evaluate(data_dir: str | Path, *, model: str, seed: int, config: IclConfig, checkpoints: Checkpoints,
             device: torch.device) -> dict[str, Any]:
    """The metrics record of `model` on the processed dataset in `data_dir` (see module docstring)."""
    profile_name, profile = config.settings(device.type)
    data = load_processed(data_dir, splits=())  # meta.json: the tasks
    dataset = data.meta.get("dataset", Path(data_dir).name)
    files = {name: c for name, c in checkpoints.items() if not isinstance(c, str)}
    runnable = [t for t in data.schema.tasks if _applicable(model, t) and checkpoint_name(model, t) in files]
    status = {t.name: NOT_APPLICABLE if not _applicable(model, t) else NOT_RUN for t in data.schema.tasks}
    run = _Run(dataset, model, seed, config, profile_name, profile, device)
    if not runnable:  # nothing to predict: no split is read
        return run.record(status, {"val": {}, "test": {}}, {}, None, 0.0, None)
    data = load_processed(data_dir)
    train, splits = data.splits["train"], {s: data.splits[s] for s in ("val", "test")}
    rows = context.context_rows(len(train), profile.context_size, seed)
    x_context = _features(train)[rows]
    scored = {s: context.eval_rows(len(d), profile.eval_rows, seed, s) for s, d in splits.items()}
    x_eval = {s: _features(d)[scored[s]] for s, d in splits.items()}
    targets = {name: v.numpy()[rows] for name, v in train.targets().items()}
    metrics: dict[str, dict[str, float]] = {"val": {}, "test": {}}
    used: dict[str, str] = {}
    seconds = 0.0
    for task in runnable:
        name = checkpoint_name(model, task)
        path, sha256 = files[name]
        t0 = time.perf_counter()
        y = targets[task.name]
        if task.type == "regression":
            preds, used[name] = run.tabicl("regressor", path, sha256, x_context, y, x_eval)
        else:
            present, codes = np.unique(y.astype(np.int64), return_inverse=True)
            n_classes = 2 if task.type == "binary" else int(task.n_classes or present.max() + 1)
            if len(present) == 1:  # one class in the context: it is certain
                proba = {s: np.ones((len(x), 1)) for s, x in x_eval.items()}
                used[name] = run.checkpoint_sha(path, sha256)
            elif model == "orion_msp":
                proba, used[name] = run.orion(path, sha256, x_context, codes, x_eval)
            else:
                proba, used[name] = run.tabicl("classifier", path, sha256, x_context, codes, x_eval)
            scores = {s: _classifier_scores(p, present, n_classes) for s, p in proba.items()}
            # binary tasks are scored by a logit: log p1 - log p0
            preds = {s: (v[:, 1] - v[:, 0]) if task.type == "binary" else v for s, v in scores.items()}
        task_seconds = time.perf_counter() - t0
        seconds += task_seconds
        log.info("%s %s seed %d, task %s: %d val+test rows predicted from %d context rows x %d view(s) in %.1f s "
                 "(profile %s, %s)", dataset, model, seed, task.name, sum(len(x) for x in x_eval.values()),
                 len(rows), profile.n_estimators[model], task_seconds, profile_name, device.type)
        for s, d in splits.items():
            truth = d.targets()[task.name].numpy()[scored[s]]
            metrics[s] |= task_metrics([task], {task.name: truth}, {task.name: preds[s]})
        status[task.name] = "ok"
    return run.record(status, metrics, {n: (str(files[n][0]), sha) for n, sha in used.items()},
                      (len(rows), len(train)), seconds,
                      {s: {"scored": len(scored[s]), "rows": len(d)} for s, d in splits.items()})


@dataclasses.dataclass
class _Run:
    """One dataset x model x seed: the models it loads once, the Orion-MSP ensemble it keeps across tasks."""

    dataset: str
    model: str
    seed: int
    config: IclConfig
    profile_name: str
    profile: IclProfile
    device: torch.device
    _orion: context.OrionMSPEnsemble | None = None
    _orion_sha: str = ""

    def chunk(self, x_eval: Mapping[str, np.ndarray]) -> int:
        return self.profile.chunk_size or max(len(x) for x in x_eval.values())

    def checkpoint_sha(self, path: Path, sha256: str) -> str:
        from multitab.icl.checkpoint import verify

        return verify(path, sha256)

    def orion(self, path: Path, sha256: str, x_context: np.ndarray, codes: np.ndarray,
              x_eval: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
        if self._orion is None:  # one load and one set of encoded views for all of the dataset's tasks
            switches = self.config.orion
            net, self._orion_sha = load_orion(path, sha256, window=switches.window, memory=switches.memory,
                                              links=switches.links, link_seed=switches.link_seed, device=self.device)
            self._orion = context.OrionMSPEnsemble(
                net, n_estimators=self.profile.n_estimators["orion_msp"], seed=self.seed,
                chunk_size=self.chunk(x_eval)).fit(x_context)
        return self._orion.predict_proba(codes, x_eval), self._orion_sha

    def tabicl(self, kind: str, path: Path, sha256: str, x_context: np.ndarray, y: np.ndarray,
               x_eval: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], str]:
        estimator, found = tabicl_model.build(kind, path=path, sha256=sha256, seed=self.seed,
                                              n_estimators=self.profile.n_estimators["tabicl"],
                                              device=self.device.type)
        names = list(x_eval)
        out = tabicl_model.predict(estimator, x_context, y, np.concatenate([x_eval[n] for n in names]))
        bounds = np.cumsum([0] + [len(x_eval[n]) for n in names])
        return {n: out[bounds[i]: bounds[i + 1]] for i, n in enumerate(names)}, found

    def record(self, status: dict[str, str], metrics: dict[str, dict[str, float]],
               checkpoints: dict[str, tuple[str, str]], rows: tuple[int, int] | None,
               seconds: float, scored: dict[str, dict[str, int]] | None) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "model": self.model, "seed": self.seed, "kind": PRETRAINED,
            "status": status, "val": metrics["val"], "test": metrics["test"],
            "val_mean": mean_metric(metrics["val"]) if metrics["val"] else math.nan,
            "test_mean": mean_metric(metrics["test"]) if metrics["test"] else math.nan,
            "checkpoints": {name: {"path": path, "sha256": sha} for name, (path, sha) in checkpoints.items()},
            "profile": self.profile_name, "device": self.device.type,
            "context": {"rule": self.config.context_rule, "size": self.profile.context_size,
                        "rows_used": rows[0] if rows else None, "train_rows": rows[1] if rows else None},
            "eval_rows": {"at_most": self.profile.eval_rows, "splits": scored},
            "chunk_size": self.profile.chunk_size, "n_estimators": self.profile.n_estimators[self.model],
            "context_encoding": "reused across chunks and tasks" if self.model == "orion_msp" else "one call per task",
            "orion": dataclasses.asdict(self.config.orion) if self.model == "orion_msp" else None,
            "seconds": seconds,
        }
