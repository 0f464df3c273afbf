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
Models that are not torch modules (XGBoost) go through `fit_predict` in stages/train.py instead.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from multitab.evaluation.metrics import mean_metric, task_metrics
from multitab.runtime import tune_cpu_runtime
from multitab.training import checkpoint as ckpt
from multitab.training.data import ProcessedData, TensorSplit, iterate_batches, place
from multitab.training.early_stopping import EarlyStopping
from multitab.training.losses import MultitaskLoss, task_loss
from multitab.training.predict import _autocast, _labels, predict, regression_mse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSettings:
    seed: int
    max_epochs: int
    patience: int
    batch_size: int = 2048
    optimizer: Literal["adam", "adamw"] = "adamw"
    lr: float = 1e-3
    weight_decay: float = 1e-5
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: bool = False
    deterministic: bool = True
    progress: bool = False
    # Test hook: called after every optimiser step with (epoch, step); lets a test kill a run mid-epoch.
    on_step: Callable[[int, int], None] | None = field(default=None, compare=False)


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


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed Python, numpy and torch. `deterministic`: deterministic kernels, strictly on CPU (bit-identical
    reruns and resumes); on CUDA as far as kernels allow (warnings, not errors, for ops without a
    deterministic implementation; cuBLAS gets the workspace setting it needs)."""
    import os
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    cuda = torch.cuda.is_available()
    if deterministic and cuda:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic, warn_only=cuda)
    tune_cpu_runtime()  # flush denormals, keep freed memory (multitab/runtime.py)
    if cuda:
        torch.backends.cudnn.benchmark = not deterministic


def make_optimizer(model: torch.nn.Module, settings: RunSettings) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[settings.optimizer]
    # the fused kernel (one pass over all parameters) exists on CPU and CUDA for float parameters
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params) or None
    return cls(params, lr=settings.lr, weight_decay=settings.weight_decay, fused=fused)


def evaluate(
    model: torch.nn.Module,
    forward: Callable[..., dict[str, torch.Tensor]],
    data: ProcessedData,
    split_name: str,
    train_split: TensorSplit,
    settings: RunSettings,
    device: torch.device,
) -> tuple[dict[str, float], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Metrics on one split (eval mode); returns (metrics, predictions, labels)."""
    model.eval()
    fit_context = getattr(model, "fit_context", None)
    if callable(fit_context):
        with torch.inference_mode():
            fit_context(train_split.x_num, train_split.x_cat, train_split.targets())
    split = data.splits[split_name]
    preds = predict(forward, split, data.schema.tasks, batch_size=settings.batch_size, device=device,
                    precision=settings.precision)
    labels = _labels(split)
    return task_metrics(data.schema.tasks, labels, preds), preds, labels


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
        with _autocast(device, settings.precision):
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
    if settings.precision == "bf16" and device.type != "cuda":
        log.warning("precision bf16 applies on CUDA only; training in float32 on %s", device)
    tasks = data.schema.tasks
    loss_fn = MultitaskLoss(tasks)
    model.to(device)
    optimizer = make_optimizer(model, settings)
    forward: Callable[..., dict[str, torch.Tensor]] = model
    if settings.compile and device.type == "cuda":
        # Static shapes: the full batch and the last partial batch each get their own graph, instead of a
        # recompile with dynamic shapes (slower kernels) when the second size shows up.
        forward = torch.compile(model, dynamic=False)  # type: ignore[assignment]
    train_split = place(data.splits["train"], device)
    data.splits = {"train": train_split, **{k: place(v, device) for k, v in data.splits.items() if k != "train"}}
    generator = torch.Generator(device=train_split.device)
    generator.manual_seed(settings.seed)
    stopper = EarlyStopping(settings.patience)
    history: list[dict[str, float]] = []
    start_epoch, train_seconds, loop_seconds, samples_seen = 0, 0.0, 0.0, 0
    checkpoint_dir = Path(checkpoint_dir)
    last = ckpt.resume(checkpoint_dir, run_fingerprint, run_settings)
    if last is not None:
        model.load_state_dict(last["model"])
        optimizer.load_state_dict(last["optimizer"])
        ckpt.set_rng_state(last["rng"], generator)
        stopper = EarlyStopping.from_state_dict(last["early_stopping"])
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
        val_metrics, _, _ = evaluate(model, forward, data, "val", train_split, settings, device)
        val_mean = mean_metric(val_metrics)
        improved = stopper.step(val_mean, epoch)
        epoch_seconds = time.perf_counter() - t0
        train_seconds += epoch_seconds
        loop_seconds += t_loop
        samples_seen += n_train
        row: dict[str, float] = {"epoch": epoch + 1, "train_loss": train_loss,
                                 **{f"train_loss_{k}": float(v.item()) / max(n_batches, 1) for k, v in task_sums.items()},
                                 **{f"val_{k}": v for k, v in val_metrics.items()},
                                 "val_mean": val_mean, "epoch_seconds": epoch_seconds, "data_seconds": stats.data_seconds,
                                 "samples_per_second": n_train / t_loop if t_loop > 0 else math.nan}
        history.append(row)
        log.info("epoch %d: train loss %.4f, val mean %.4f%s, %.0f samples/s", epoch + 1, train_loss, val_mean,
                 " (best)" if improved else "", row["samples_per_second"])
        epoch += 1
        stopped_early = stopper.should_stop
        if improved:
            ckpt.save(checkpoint_dir / ckpt.BEST, {**ckpt.identity(run_fingerprint, run_settings), "epoch": epoch,
                                                   "model": model.state_dict(), "val": val_metrics})
        ckpt.save(checkpoint_dir / ckpt.LAST, {
            **ckpt.identity(run_fingerprint, run_settings), "epoch": epoch, "model": model.state_dict(), "val": val_metrics,
            "optimizer": optimizer.state_dict(), "rng": ckpt.rng_state(generator),
            "early_stopping": stopper.state_dict(), "history": history, "stopped": stopped_early,
            "train_seconds": train_seconds, "loop_seconds": loop_seconds, "samples_seen": samples_seen,
        })
        if stopped_early:
            log.info("early stop after epoch %d: no improvement for %d epochs (best epoch %d)",
                     epoch, stopper.patience, stopper.best_epoch + 1)

    best = ckpt.load_best(checkpoint_dir, run_fingerprint, run_settings)
    model.load_state_dict(best["model"])
    model.to(device)
    val_metrics = dict(best["val"])  # measured at the best epoch, with these weights
    test_metrics, test_preds, test_labels = evaluate(model, forward, data, "test", train_split, settings, device)
    test_mse, test_mse_std = regression_mse(tasks, test_labels, test_preds, data.meta.get("target_stats", {}))
    return RunResult(
        val=val_metrics, test=test_metrics, test_mse=test_mse, test_mse_standardised=test_mse_std,
        best_epoch=stopper.best_epoch + 1, epochs=epoch, stopped_early=stopped_early,
        train_seconds=train_seconds, samples_per_second=samples_seen / loop_seconds if loop_seconds > 0 else math.nan,
        device=str(device), history=history, resumed_from_epoch=resumed_from,
    )
