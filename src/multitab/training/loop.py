"""The training loop: one run = one model on one dataset with one seed.

    result = train(model, data, settings, checkpoint_dir=...)

Every epoch: shuffle the training split (seeded generator), one optimiser step per batch of 2048 on the
summed task losses, evaluate on validation, step early stopping on the mean validation metric, save
`best.pt` on improvement and `last.pt` always (atomically). Afterwards the best weights are tested.

Single-task baselines are one submodel per task behind one module (the models' PerTask wrapper). They
are trained here with ONE optimiser over all parameters. This equals the authors' one optimiser per task
model: the submodels share no parameter, the loss is the sum of the task losses so each submodel's
gradient is that of its own task loss, and Adam / AdamW (and their weight decay) act on each parameter
on its own, with no global quantity (we clip no gradient norm). tests/test_training.py checks it.

Model hooks honoured when present:
- `training_loss(x_num, x_cat, targets, task_loss_fn) -> (loss, outputs)`: the model's own training
  objective (MAYA), where `task_loss_fn(task_name, output, target) -> scalar` is the plain task loss;
- `fit_context(x_num, x_cat, targets)`: called with the whole training split before every evaluation
  (models that retrieve from the training set).
Models that are not torch modules (XGBoost) go through `fit_predict` in training/run.py instead.
Evaluation (predictions in stored order, metrics, MSE in target units) is in evaluate.py; the device,
seeding and mixed precision in device.py.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm.auto import tqdm

from multitab.metrics import mean_metric
from multitab.models.accelerate import accelerate_cpu
from multitab.training import checkpoint as ckpt
from multitab.training.data import ProcessedData, TensorSplit, iterate_batches, place
from multitab.training.device import autocast, resolve_device, seed_everything
from multitab.training.early_stopping import EarlyStopping
from multitab.training.evaluate import evaluate, regression_mse
from multitab.training.losses import MultitaskLoss, task_loss

log = logging.getLogger(__name__)

# What run.py takes from here: the loop's types and the run setup it shares with the loop.
__all__ = ["EpochStats", "RunResult", "RunSettings", "history_row", "make_optimizer", "optimizer_for", "regression_mse",
           "resolve_device", "save_epoch", "seed_everything", "evaluate_best", "smoothed_note", "train", "train_epoch"]


@dataclass(frozen=True)
class RunSettings:
    """The loop's settings, every one given (a run's come from its record: multitab.run_config)."""

    seed: int
    max_epochs: int
    patience: int
    batch_size: int
    optimizer: Literal["adam", "adamw"]
    lr: float
    weight_decay: float
    device: Literal["auto", "cpu", "cuda"]
    precision: Literal["fp32", "bf16"]
    compile: bool
    deterministic: bool
    progress: bool
    # the early-stopping criterion's moving-average factor (train.early_stopping_smoothing); None: the raw
    # per-epoch value, the paper's rule (early_stopping.py)
    early_stopping_smoothing: float | None
    # Test hook: called after every optimiser step with (epoch, step); lets a test kill a run mid-epoch.
    on_step: Callable[[int, int], None] | None = field(compare=False)


@dataclass
class RunResult:
    val: dict[str, float]  # task -> metric of the best epoch on validation
    test: dict[str, float]  # task -> metric of the best weights on test
    test_mse: dict[str, float]  # regression task -> MSE in original target units
    test_mse_standardised: dict[str, float]
    best_epoch: int  # 1-based
    epochs: int  # epochs run
    stopped_early: bool
    train_seconds: float  # optimisation and validation, summed over resumed pieces
    samples_per_second: float  # training samples per second of the optimisation loop
    device: str
    history: list[dict[str, float]]
    resumed_from_epoch: int  # 0 = trained from scratch


def make_optimizer(model: torch.nn.Module, settings: RunSettings) -> torch.optim.Optimizer:
    return optimizer_for([p for p in model.parameters() if p.requires_grad], settings)


def optimizer_for(params: list[torch.Tensor], settings: RunSettings) -> torch.optim.Optimizer:
    """The run's optimiser over `params` (a model's trainable parameters, in `parameters()` order)."""
    if not params:
        raise ValueError("model has no trainable parameters")
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[settings.optimizer]
    # the fused kernel (one pass over all parameters) exists on CPU and CUDA for float parameters
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params) or None
    return cls(params, lr=settings.lr, weight_decay=settings.weight_decay, fused=fused)


@dataclass
class EpochStats:
    loss_sum: torch.Tensor  # summed batch losses (float64, on the device)
    task_sums: dict[str, torch.Tensor]
    n_batches: int
    n_samples: int
    seconds: float  # wall time of the epoch (CUDA synchronised at the end)
    data_seconds: float  # host time spent producing batches (the data path), inside `seconds`


def train_epoch(
    model: torch.nn.Module,
    forward: Callable[..., dict[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    split: TensorSplit,
    generator: torch.Generator,
    loss_fn: MultitaskLoss,
    settings: RunSettings,
    device: torch.device,
    *,
    epoch: int = 0,
) -> EpochStats:
    """One pass over `split` in a fresh random order: one optimiser step per batch on the summed task
    losses (or the model's own `training_loss`). No host-device synchronisation inside the epoch."""
    by_name = {t.name: t for t in loss_fn.tasks}
    custom_loss = getattr(model, "training_loss", None)

    def per_task_loss(name: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return task_loss(by_name[name], output, target)

    model.train()
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    task_sums = {t.name: torch.zeros((), device=device, dtype=torch.float64) for t in loss_fn.tasks}
    n_batches = n_samples = 0
    data_seconds = 0.0
    bar = tqdm(total=len(split), unit="sample", unit_scale=True, desc=f"epoch {epoch + 1}/{settings.max_epochs}",
               disable=not settings.progress, leave=False, mininterval=1.0)
    batches = iterate_batches(split, settings.batch_size, generator=generator, device=device)
    step = 0
    while True:
        t_data = time.perf_counter()
        batch = next(batches, None)
        data_seconds += time.perf_counter() - t_data
        if batch is None:
            break
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, settings.precision):
            if callable(custom_loss):
                loss, outputs = custom_loss(batch.x_num, batch.x_cat, batch.targets, per_task_loss)
                parts = {k: v.detach() for k, v in loss_fn.per_task(outputs, batch.targets).items()}
            else:
                outputs = forward(batch.x_num, batch.x_cat)
                loss, parts = loss_fn(outputs, batch.targets)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
        for k, v in parts.items():
            task_sums[k] += v.detach()
        n_batches += 1
        n_samples += len(batch)
        bar.update(len(batch))
        if settings.on_step is not None:
            settings.on_step(epoch, step)
        step += 1
    bar.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return EpochStats(loss_sum, task_sums, n_batches, n_samples, time.perf_counter() - t0, data_seconds)


def train(
    model: torch.nn.Module,
    data: ProcessedData,
    settings: RunSettings,
    *,
    checkpoint_dir: Path,
    run_fingerprint: str,
    run_settings: dict[str, Any] | None = None,
) -> RunResult:
    """Train `model` on `data` (resuming from `checkpoint_dir/last.pt` when it matches), test the best
    epoch's weights, and return the metrics. The caller seeds torch before building the model.
    `run_settings` (what `run_fingerprint` hashes) is stored to explain a mismatch on resume."""
    device = resolve_device(settings.device)
    tasks = data.schema.tasks
    loss_fn = MultitaskLoss(tasks)
    model.to(device)
    if device.type == "cpu":
        accelerate_cpu(model)  # the chunked CPU kernels (models/accelerate.py): same parameters and function
    optimizer = make_optimizer(model, settings)
    forward: Callable[..., dict[str, torch.Tensor]] = model
    if settings.compile and device.type == "cuda":
        # Static shapes: the full batch and the last partial batch each get their own graph, instead of a
        # recompile with dynamic shapes (slower kernels) when the second size shows up.
        forward = torch.compile(model, dynamic=False)  # type: ignore[assignment]
    train_split = place(data.splits["train"], device)
    data.splits = {"train": train_split, **{k: place(v, device) for k, v in data.splits.items() if k != "train"}}
    eval_args: dict[str, Any] = {"batch_size": settings.batch_size, "device": device, "precision": settings.precision}
    generator = torch.Generator(device=train_split.device)
    generator.manual_seed(settings.seed)
    stopper = EarlyStopping(settings.patience, smoothing=settings.early_stopping_smoothing)
    history: list[dict[str, float]] = []
    start_epoch, train_seconds, loop_seconds, samples_seen = 0, 0.0, 0.0, 0
    checkpoint_dir = Path(checkpoint_dir)
    last = ckpt.resume(checkpoint_dir, run_fingerprint, run_settings)
    if last is not None:
        model.load_state_dict(last["model"])
        optimizer.load_state_dict(last["optimizer"])
        ckpt.set_rng_state(last["rng"], generator)
        stopper = EarlyStopping.resume(last["early_stopping"], settings.early_stopping_smoothing)
        history = list(last["history"])
        start_epoch = int(last["epoch"])
        train_seconds, loop_seconds = float(last["train_seconds"]), float(last["loop_seconds"])
        samples_seen = int(last["samples_seen"])
        log.info("resuming from %s after epoch %d", checkpoint_dir / ckpt.LAST, start_epoch)
    resumed_from = start_epoch
    n_train = len(train_split)
    stopped_early = bool(last is not None and last.get("stopped", False))

    epoch = start_epoch
    while epoch < settings.max_epochs and not stopped_early:
        t0 = time.perf_counter()
        stats = train_epoch(model, forward, optimizer, train_split, generator, loss_fn, settings, device,
                            epoch=epoch)
        loss_sum, task_sums, n_batches = stats.loss_sum, stats.task_sums, stats.n_batches
        t_loop = stats.seconds
        train_loss = float(loss_sum.item()) / max(n_batches, 1)
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"epoch {epoch + 1}: training loss is {train_loss}; lower the learning rate "
                                     "(train.optim) or check the data")
        val_metrics, _, _ = evaluate(model, forward, data, "val", train_split, **eval_args)
        val_mean = mean_metric(val_metrics)
        improved = stopper.step(val_mean, epoch)
        epoch_seconds = time.perf_counter() - t0
        train_seconds += epoch_seconds
        loop_seconds += t_loop
        samples_seen += n_train
        row = history_row(epoch, train_loss, {k: float(v.item()) / max(n_batches, 1) for k, v in task_sums.items()},
                          val_metrics, val_mean, epoch_seconds=epoch_seconds, data_seconds=stats.data_seconds,
                          loop_seconds=t_loop, n_train=n_train, criterion=stopper.history_fields(val_mean))
        history.append(row)
        log.info("epoch %d: train loss %.4f, val mean %.4f%s%s, %.0f samples/s", epoch + 1, train_loss, val_mean,
                 smoothed_note(row), " (best)" if improved else "", row["samples_per_second"])
        epoch += 1
        stopped_early = stopper.should_stop
        save_epoch(checkpoint_dir, run_fingerprint, run_settings, epoch=epoch, improved=improved,
                   model_state=model.state_dict(), val_metrics=val_metrics, optimizer_state=optimizer.state_dict(),
                   rng=ckpt.rng_state(generator), stopper=stopper, history=history, stopped=stopped_early,
                   train_seconds=train_seconds, loop_seconds=loop_seconds, samples_seen=samples_seen)
        if stopped_early:
            log.info("early stop after epoch %d: no improvement for %d epochs (best epoch %d)",
                     epoch, stopper.patience, stopper.best_epoch + 1)

    return evaluate_best(model, forward, data, train_split, checkpoint_dir, run_fingerprint, run_settings,
                         eval_args=eval_args, stopper=stopper, epochs=epoch, stopped_early=stopped_early,
                         train_seconds=train_seconds, loop_seconds=loop_seconds, samples_seen=samples_seen,
                         history=history, resumed_from=resumed_from)


def history_row(
    epoch: int, train_loss: float, task_losses: dict[str, float], val_metrics: dict[str, float], val_mean: float, *,
    epoch_seconds: float, data_seconds: float, loop_seconds: float, n_train: int,
    criterion: dict[str, float] | None = None,
) -> dict[str, float]:
    """One epoch's row of the history (the curves: metrics.json's history, dvclive); `epoch` 0-based.
    `criterion`: the early-stopping criterion's own columns (`EarlyStopping.history_fields`: the smoothed
    mean validation metric when smoothing is on, after `val_mean`; nothing when off)."""
    return {"epoch": epoch + 1, "train_loss": train_loss,
            **{f"train_loss_{k}": v for k, v in task_losses.items()},
            **{f"val_{k}": v for k, v in val_metrics.items()},
            "val_mean": val_mean, **(criterion or {}), "epoch_seconds": epoch_seconds, "data_seconds": data_seconds,
            "samples_per_second": n_train / loop_seconds if loop_seconds > 0 else math.nan}


def smoothed_note(row: dict[str, float]) -> str:
    """The log line's mention of the smoothed criterion (`` (smoothed 0.8123)``), empty when smoothing is off."""
    return f" (smoothed {row['val_mean_smoothed']:.4f})" if "val_mean_smoothed" in row else ""


def save_epoch(
    checkpoint_dir: Path, run_fingerprint: str, run_settings: dict[str, Any] | None, *, epoch: int, improved: bool,
    model_state: dict[str, torch.Tensor], val_metrics: dict[str, float], optimizer_state: dict[str, Any],
    rng: dict[str, Any], stopper: EarlyStopping, history: list[dict[str, float]], stopped: bool,
    train_seconds: float, loop_seconds: float, samples_seen: int,
) -> None:
    """The checkpoints of a finished epoch (`epoch` 1-based): `best.pt` when it improved, `last.pt` always."""
    if improved:
        ckpt.save(checkpoint_dir / ckpt.BEST, {**ckpt.identity(run_fingerprint, run_settings), "epoch": epoch,
                                               "model": model_state, "val": val_metrics})
    ckpt.save(checkpoint_dir / ckpt.LAST, {
        **ckpt.identity(run_fingerprint, run_settings), "epoch": epoch, "model": model_state, "val": val_metrics,
        "optimizer": optimizer_state, "rng": rng,
        "early_stopping": stopper.state_dict(), "history": history, "stopped": stopped,
        "train_seconds": train_seconds, "loop_seconds": loop_seconds, "samples_seen": samples_seen,
    })


def evaluate_best(
    model: torch.nn.Module, forward: Callable[..., dict[str, torch.Tensor]], data: ProcessedData,
    train_split: TensorSplit, checkpoint_dir: Path, run_fingerprint: str, run_settings: dict[str, Any] | None, *,
    eval_args: dict[str, Any], stopper: EarlyStopping, epochs: int, stopped_early: bool, train_seconds: float,
    loop_seconds: float, samples_seen: int, history: list[dict[str, float]], resumed_from: int,
) -> RunResult:
    """After training: load `best.pt` into `model`, test it, and return the run's result."""
    best = ckpt.load_best(checkpoint_dir, run_fingerprint, run_settings)
    model.load_state_dict(best["model"])
    device = eval_args["device"]
    model.to(device)
    val_metrics = dict(best["val"])  # measured at the best epoch, with these weights
    test_metrics, test_preds, test_labels = evaluate(model, forward, data, "test", train_split, **eval_args)
    test_mse, test_mse_std = regression_mse(data.schema.tasks, test_labels, test_preds,
                                            data.meta.get("target_stats", {}))
    return RunResult(
        val=val_metrics, test=test_metrics, test_mse=test_mse, test_mse_standardised=test_mse_std,
        best_epoch=stopper.best_epoch + 1, epochs=epochs, stopped_early=stopped_early,
        train_seconds=train_seconds, samples_per_second=samples_seen / loop_seconds if loop_seconds > 0 else math.nan,
        device=str(device), history=history, resumed_from_epoch=resumed_from,
    )
