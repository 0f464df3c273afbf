"""One training run end to end: load the processed data, build the model, train (or fit) it, and return
the metrics record that `stages/train.py` writes as results/runs/<dataset>/<model>/seed<S>/metrics.json.

The record's schema is `METRICS_SCHEMA` (JSON Schema; aggregate and the tests read it). Non-finite
metric values (an undefined AUC) are written as null.
"""

from __future__ import annotations

import hashlib
import logging
import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import multitab.training.checkpoint as ckpt
from multitab.files.io import remove_stale_temporaries
from multitab.hparams.keywords import problems
from multitab.metrics import mean_metric, task_metrics
from multitab.models import RUN_KEYWORDS, build_model, model_class
from multitab.runs.record import RunConfig, TrainSettings
from multitab.training.compute_mode import PRECISIONS, computing
from multitab.training.data import ProcessedData, load_processed
from multitab.training.data_hashes import data_hashes, hash_in_background
from multitab.training.device import resolve_device, seed_everything
from multitab.training.evaluate import regression_mse
from multitab.training.graphs import NOT_TORCH
from multitab.training.loop import RunResult, train
from multitab.training.settings import RunSettings

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class RunSpec:
    dataset: str
    model: str
    seed: int
    data_path: Path
    checkpoint_dir: Path


def build_run_model(name: str, meta: dict[str, Any], spec: RunSpec, run: RunConfig) -> Any:
    """`build_model(name, meta, run.hparams.model)` of the model registry (multitab.models.MODELS: tests register
    their tiny models there). Models that are not torch modules (XGBoost) do their own training and take the
    run's seed, early stopping rounds, device and threads as constructor keywords (RUN_KEYWORDS)."""
    hparams, config = run.hparams, run.train
    kwargs = dict(hparams.model)
    if not issubclass(model_class(name), torch.nn.Module):
        taken = sorted(set(kwargs) & set(RUN_KEYWORDS))
        if taken:
            raise ValueError(f"{hparams.file}: {taken} are the run's settings (train:), not hyperparameters; remove them")
        kwargs |= {"seed": spec.seed, "early_stopping_rounds": config.xgboost_early_stopping_rounds,
                   "device": config.device, "n_threads": config.num_threads}
    # what `python -m multitab.runs` checks, again for a stage DVC runs on a file edited since
    wrong = problems(name, hparams.model)
    if wrong:
        raise ValueError(f"{hparams.file or 'hyperparameters'}: model.{wrong[0][0]}: {wrong[0][1]}")
    try:
        return build_model(name, meta, kwargs)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{hparams.file or 'hyperparameters'}: {e}") from None


def model_code_version(model: Any) -> str:
    """sha256 over the source of the model's code and of the training code: for a model class defined in
    a package, every .py file of that package (shared blocks included); otherwise the files defining the
    class and its bases; plus multitab/training/*.py. Any edit there makes old checkpoints foreign."""
    files: set[Path] = set(Path(__file__).parent.glob("*.py"))
    for cls in type(model).__mro__:
        module = sys.modules.get(cls.__module__)
        source = getattr(module, "__file__", None)
        if source is None or cls.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        package = cls.__module__.rpartition(".")[0]
        files |= set(Path(source).parent.rglob("*.py")) if package else {Path(source)}
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def resume_settings(
    spec: RunSpec, config: TrainSettings, data: ProcessedData, model: torch.nn.Module, *, overrides: dict[str, Any],
    optim: dict[str, Any], max_epochs: int, patience: int, hparams: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every setting that changes a run's numbers; a checkpoint is resumed only when all are equal (its
    fingerprint is their hash). Threads, determinism, device and dtype change float results in the last
    bits; the data are identified by the sha256 of the processed files (`data_hashes`), the code by
    `model_code_version`.
    `early_stopping_smoothing` is there only when set (train.early_stopping_smoothing): off, the settings
    are those of runs from before the option, and a checkpoint trained without it is never resumed with it."""
    device = resolve_device(config.device)
    settings = {
        "dataset": spec.dataset, "model": spec.model, "seed": spec.seed, "overrides": overrides, "hparams": hparams,
        "optim": optim, "max_epochs": max_epochs, "patience": patience, "batch_size": config.batch_size,
        "precision": config.precision, "max_train_rows": config.max_train_rows, "meta": data.meta,
        "num_threads": torch.get_num_threads(), "deterministic": config.deterministic,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "dtype": str(next((p.dtype for p in model.parameters()), torch.get_default_dtype())),
        "compile": config.compile, "torch": torch.__version__, "protocol": config.protocol,
        "data": data_hashes(data.path),
        "code": model_code_version(model),
    }
    for key in ("early_stopping_smoothing", "eval_batch_size"):  # only when set: older checkpoints resume
        if getattr(config, key) is not None:
            settings[key] = getattr(config, key)
    return settings


def load_run_data(spec: RunSpec, config: TrainSettings, device: torch.device | None = None) -> ProcessedData:
    """The run's processed data (only the first `train.max_train_rows` training rows are read when set), its
    tensors read straight onto `device` (default CPU; training/data.py `load_processed`). The files' sha256
    (the run's fingerprint) are computed meanwhile in the background (training/data_hashes.py)."""
    t0 = time.perf_counter()
    if Path(spec.data_path).is_dir():
        hash_in_background(spec.data_path)
    data = load_processed(spec.data_path, device=device, max_rows={"train": config.max_train_rows})
    log.info("data loaded in %.1f s: %s rows, %.2f GB of tensors", time.perf_counter() - t0,
             {k: len(v) for k, v in data.splits.items()}, sum(v.nbytes() for v in data.splits.values()) / 1e9)
    return data


@dataclass(frozen=True)
class TorchRun:
    """What a torch model's run trains with: the loop's settings, the optimiser and epochs it records, and
    the resolved settings its checkpoints' fingerprint hashes."""

    settings: RunSettings
    optim: dict[str, Any]
    max_epochs: int
    run_settings: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return ckpt.fingerprint(self.run_settings)


def torch_run(
    spec: RunSpec, run: RunConfig, data: ProcessedData, model: torch.nn.Module, *,
    on_step: Callable[[int, int], None] | None = None,
) -> TorchRun:
    """The settings of a torch model's run (`model` built for it by `build_run_model`): the run's record, as
    `python -m multitab.runs` resolved it."""
    hparams, config = run.hparams, run.train
    optim = run.optim
    if optim is None or config.max_epochs is None:
        raise ValueError(f"{hparams.file}: {spec.model} is trained by gradient descent; the file needs `optim:` "
                         "(optimizer, lr, weight_decay, max_epochs)")
    settings = RunSettings(
        seed=spec.seed, max_epochs=config.max_epochs, patience=config.patience, batch_size=config.batch_size,
        optimizer=optim["optimizer"], lr=optim["lr"], weight_decay=optim["weight_decay"], device=config.device,
        precision=config.precision, compile=config.compile, deterministic=config.deterministic,
        progress=run.progress, on_step=on_step, early_stopping_smoothing=config.early_stopping_smoothing,
        cuda_graph=config.cuda_graph, eval_batch_size=config.eval_batch_size,
    )
    values = hparams.record()
    run_settings = resume_settings(spec, config, data, model, overrides=config.overrides, optim=optim,
                                   max_epochs=config.max_epochs, patience=config.patience,
                                   hparams={"model": values["model"], "point": values["point"]})
    return TorchRun(settings, optim, config.max_epochs, run_settings)


def torch_record(
    spec: RunSpec, run: RunConfig, data: ProcessedData, model: torch.nn.Module, torch_run_: TorchRun,
    result: RunResult,
) -> dict[str, Any]:
    """The metrics record of a torch model's run."""
    n_params = sum(p.numel() for p in model.parameters())
    # every resolved setting of the run (its checkpoint's identity), the processed meta.json aside
    resolved = {k: v for k, v in torch_run_.run_settings.items() if k != "meta"}
    return _finish_record(spec, run, data, result, optim=torch_run_.optim, max_epochs=torch_run_.max_epochs,
                          n_params=n_params, resolved=resolved)


def _finish_record(
    spec: RunSpec, run: RunConfig, data: ProcessedData, result: RunResult, *,
    optim: dict[str, Any], max_epochs: int, n_params: int | None, resolved: dict[str, Any],
) -> dict[str, Any]:
    record = metrics_record(spec, data, result, optim=optim, max_epochs=max_epochs, n_params=n_params)
    record["max_train_rows"] = run.train.max_train_rows
    record["protocol"] = run.train.protocol
    record["settings"] = resolved
    if run.train.cuda_graph:  # what was captured, or why not (training/graphs.py)
        record["cuda_graph"] = result.cuda_graph if result.cuda_graph is not None else NOT_TORCH
    # the hyperparameters the run trained with: their file, its selection (or "grid point"), the point, the values
    record["hparams"] = run.hparams.record()
    return record


def run_training(
    spec: RunSpec,
    run: RunConfig,
    *,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Train one run; returns (metrics record, per-epoch history). The model: `build_run_model` with
    `run.hparams.model`; the optimiser `run.hparams.optim`, the budget and every other setting `run.train`: the
    run's record as `python -m multitab.runs` resolved it (multitab.runs.resolve; multitab.runs.resolve.settings_for for
    code outside the pipeline)."""
    config = run.train
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    base_model = spec.model.partition("@")[0]  # `<model>@<variant>` runs build <model> (the variant: in hparams)
    # a torch model's data go straight to its device; a model that trains itself reads host arrays
    on_torch = issubclass(model_class(base_model), torch.nn.Module)
    data = load_run_data(spec, config, resolve_device(config.device) if on_torch else None)
    seed_everything(spec.seed, config.deterministic)
    model = build_run_model(base_model, data.meta, spec, run)
    if isinstance(model, torch.nn.Module):
        settings = torch_run(spec, run, data, model, on_step=on_step)
        with computing(resolve_device(config.device), config.precision, config.deterministic) as mode:
            result = train(model, data, settings.settings, checkpoint_dir=spec.checkpoint_dir,
                           run_fingerprint=settings.fingerprint, run_settings=settings.run_settings)
        return torch_record(spec, run, data, model, settings, result) | mode.record(), result.history
    values = run.hparams.record()
    optim = {"optimizer": "none (gradient boosting)"}
    max_epochs = int(getattr(model, "n_rounds", 1))
    result = fit_predict(model, data)
    # The fitted boosters are this run's checkpoint (the stage's declared output folder), swapped in
    # whole from a temporary beside it: first remove the temporaries of a save that was killed.
    remove_stale_temporaries(spec.checkpoint_dir.parent, spec.checkpoint_dir.name)
    model.save(spec.checkpoint_dir)
    resolved = {"dataset": spec.dataset, "model": spec.model, "seed": spec.seed, "overrides": config.overrides,
                "hparams": {"model": values["model"], "point": values["point"]},
                "early_stopping_rounds": config.xgboost_early_stopping_rounds,
                "num_threads": config.num_threads, "device": config.device, "protocol": config.protocol,
                "max_train_rows": config.max_train_rows,
                "data": data_hashes(data.path)}
    record = _finish_record(spec, run, data, result, optim=optim, max_epochs=max_epochs, n_params=None,
                            resolved=resolved)
    return record, result.history


def fit_predict(model: Any, data: ProcessedData) -> RunResult:
    """Non-torch models (XGBoost, see its class docstring): `fit(x_num, x_cat, targets, x_num_val=...,
    x_cat_val=..., targets_val=...)` with its own early stopping on the validation split, then
    `predict(x_num, x_cat) -> {task: scores}` (logits / values, as the torch models) on val and test.
    `best_epoch` / `epochs` report boosting rounds (the largest over the model's boosters)."""
    train_split, val_split = data.splits["train"], data.splits["val"]
    t0 = time.perf_counter()
    model.fit(train_split.x_num.numpy(), train_split.x_cat.numpy(), {k: v.numpy() for k, v in train_split.targets().items()},
              x_num_val=val_split.x_num.numpy(), x_cat_val=val_split.x_cat.numpy(),
              targets_val={k: v.numpy() for k, v in val_split.targets().items()})
    seconds = time.perf_counter() - t0
    tasks = data.schema.tasks
    out: dict[str, dict[str, float]] = {}
    preds_by: dict[str, dict[str, np.ndarray]] = {}
    labels_by: dict[str, dict[str, np.ndarray]] = {}
    for name in ("val", "test"):
        split = data.splits[name]
        preds_by[name] = {k: np.asarray(v) for k, v in model.predict(split.x_num.numpy(), split.x_cat.numpy()).items()}
        labels_by[name] = {k: v.numpy() for k, v in split.targets().items()}
        out[name] = task_metrics(tasks, labels_by[name], preds_by[name])
    test_mse, test_mse_std = regression_mse(tasks, labels_by["test"], preds_by["test"], data.meta.get("target_stats", {}))
    best_rounds = [int(r) for r in getattr(model, "best_rounds", [1])]
    boosters = getattr(model, "boosters", [])
    rounds = max([int(b.num_boosted_rounds()) for b in boosters] or best_rounds)
    best = max(best_rounds)
    n_train = len(train_split)
    return RunResult(
        val=out["val"], test=out["test"], test_mse=test_mse, test_mse_standardised=test_mse_std, best_epoch=best,
        epochs=rounds, stopped_early=rounds < int(getattr(model, "n_rounds", rounds)), train_seconds=seconds,
        samples_per_second=n_train * rounds / seconds if seconds > 0 else math.nan,
        device=str(getattr(model, "device", "cpu")),
        history=[{"epoch": 1, "val_mean": mean_metric(out["val"]), **{f"val_{k}": v for k, v in out["val"].items()}}],
        resumed_from_epoch=0,
    )


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
        "task_types": {t.name: t.type for t in tasks}, "metric_names": {t.name: t.metric for t in tasks},
        "test": _clean(result.test), "val": _clean(result.val),
        "test_mean": _finite_or_none(mean_metric(result.test)), "val_mean": _finite_or_none(mean_metric(result.val)),
        "test_mse": _clean(result.test_mse), "test_mse_standardised": _clean(result.test_mse_standardised),
        "best_epoch": result.best_epoch, "epochs": result.epochs, "max_epochs": max_epochs,
        "stopped_early": result.stopped_early, "resumed_from_epoch": result.resumed_from_epoch,
        "train_seconds": round(result.train_seconds, 3),
        "samples_per_second": _finite_or_none(round(result.samples_per_second, 1)),
        "device": result.device, "torch_version": torch.__version__, "python": platform.python_version(),
        "n_params": n_params, "optimizer": optim, "n_rows": {k: len(v) for k, v in data.splits.items()},
        # Checks the validation policy let pass (the report's banner), a declared dataset's columns left out (listed)
        "validation_warnings": list((meta.get("validation") or {}).get("warnings", [])),
        **({"columns_left_out": meta["declared"].get("left_out", {})} if "declared" in meta else {}),
    }
