"""The training loop: one run = one model on one dataset with one seed.

    result = train(model, data, settings, checkpoint_dir=...)

Every epoch: shuffle the training split (seeded generator), one optimiser step per batch of 2048 on the
summed task losses, evaluate on validation, step early stopping on the mean validation metric, save
`best.pt` on improvement and `last.pt` always (atomically). Afterwards the best weights are tested. The
epoch itself is `train_epoch` here; what follows it (validation, early stopping, history, checkpoints,
resume) is epochs.py's loop, which stacked training (stacked.py) runs with its own vmapped epoch.

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
seeding and mixed precision in device.py; the step replayed as a CUDA graph (train.cuda_graph) in graphs.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import multitab.training.checkpoint as ckpt
from multitab.metrics import mean_metric
from multitab.models.accelerate import accelerate_cpu
from multitab.training.data import ProcessedData, TensorSplit, iterate_batches, place
from multitab.training.device import autocast, compiler_determinism, resolve_device, seed_everything
from multitab.training.early_stopping import EarlyStopping
from multitab.training.epochs import (
    EpochStats,
    RunState,
    history_row,
    run_epochs,
    save_epoch,
    smoothed_note,
    start_run,
)
from multitab.training.evaluate import evaluate, evaluation_batch, regression_mse
from multitab.training.graphs import GraphedStep, StepFn, graph_plan, load_optimizer_state
from multitab.training.losses import MultitaskLoss, task_loss
from multitab.training.settings import RunSettings

# What run.py and stacked training take from here: the loop's types and the run setup they share with it
# (history_row, save_epoch, smoothed_note and EpochStats live in epochs.py and stay importable from here).
__all__ = ["EpochStats", "RunResult", "RunSettings", "history_row", "make_optimizer", "optimizer_for", "regression_mse",
           "resolve_device", "save_epoch", "seed_everything", "evaluate_best", "smoothed_note", "train", "train_epoch"]


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
    cuda_graph: str | dict[str, Any] | None = None  # when requested: graphs.GraphPlan.record()


def make_optimizer(model: torch.nn.Module, settings: RunSettings, *, capturable: bool = False) -> torch.optim.Optimizer:
    return optimizer_for([p for p in model.parameters() if p.requires_grad], settings, capturable=capturable)


def optimizer_for(params: list[torch.Tensor], settings: RunSettings, *, capturable: bool = False
                  ) -> torch.optim.Optimizer:
    """The run's optimiser over `params` (a model's trainable parameters, in `parameters()` order);
    `capturable`: its step counts stay on the device, as a CUDA graph capture needs (graphs.py)."""
    if not params:
        raise ValueError("model has no trainable parameters")
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[settings.optimizer]
    # the fused kernel (one pass over all parameters) exists on CPU and CUDA for float parameters
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params) or None
    extra = {"capturable": True} if capturable else {}
    return cls(params, lr=settings.lr, weight_decay=settings.weight_decay, fused=fused, **extra)


def training_step(model: torch.nn.Module, forward: Callable[..., dict[str, torch.Tensor]],
                  optimizer: torch.optim.Optimizer, loss_fn: MultitaskLoss, settings: RunSettings,
                  device: torch.device) -> StepFn:
    """One optimiser step on a batch -> (loss, per-task losses), detached: the summed task losses (or the
    model's own `training_loss`). The gradients are set to None first, inside the step, so that a captured
    replay of it (graphs.py) never adds to the previous step's."""
    by_name = {t.name: t for t in loss_fn.tasks}
    custom_loss = getattr(model, "training_loss", None)

    def per_task_loss(name: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return task_loss(by_name[name], output, target)

    def step(x_num: torch.Tensor, x_cat: torch.Tensor, targets: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, settings.precision):
            if callable(custom_loss):
                loss, outputs = custom_loss(x_num, x_cat, targets, per_task_loss)
                parts = loss_fn.per_task(outputs, targets)
            else:
                outputs = forward(x_num, x_cat)
                loss, parts = loss_fn(outputs, targets)
        loss.backward()
        optimizer.step()
        return loss.detach(), {k: v.detach() for k, v in parts.items()}

    return step


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
    graphed: GraphedStep | None = None,
) -> EpochStats:
    """One pass over `split` in a fresh random order: one optimiser step per batch on the summed task
    losses (or the model's own `training_loss`): `training_step`, or `graphed` (the same step, full batches
    replayed from a CUDA graph). No host-device synchronisation inside the epoch."""
    step_fn = graphed if graphed is not None else training_step(model, forward, optimizer, loss_fn, settings, device)
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
        loss, parts = step_fn(batch.x_num, batch.x_cat, batch.targets)
        loss_sum += loss
        for k, v in parts.items():
            task_sums[k] += v
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
    if settings.compile and settings.cuda_graph:
        raise ValueError("compile and cuda_graph are both set: pick one (train.compile or train.cuda_graph)")
    plan = graph_plan(settings.cuda_graph, device, model)
    optimizer = make_optimizer(model, settings, capturable=plan.capturable)
    forward: Callable[..., dict[str, torch.Tensor]] = model
    if settings.compile and device.type == "cuda":
        # Static shapes: the full batch and the last partial batch each get their own graph, instead of a
        # recompile with dynamic shapes (slower kernels) when the second size shows up.
        compiler_determinism()  # the compiler's determinism as the kernels'
        forward = torch.compile(model, dynamic=False)  # type: ignore[assignment]
    train_split = place(data.splits["train"], device)
    data.splits = {"train": train_split, **{k: place(v, device) for k, v in data.splits.items() if k != "train"}}
    eval_args: dict[str, Any] = {"batch_size": evaluation_batch(model, settings.batch_size, settings.eval_batch_size),
                                 "device": device, "precision": settings.precision}
    generator = torch.Generator(device=train_split.device)
    generator.manual_seed(settings.seed)
    state, last = start_run(model, checkpoint_dir, run_fingerprint, run_settings, settings, generator)
    if last is not None:
        load_optimizer_state(optimizer, last["optimizer"])  # captured or not when it was written
        ckpt.set_rng_state(last["rng"], generator)
    graphed = None
    if plan.new_capture is not None:
        graphed = GraphedStep(training_step(model, forward, optimizer, loss_fn, settings, device), plan.new_capture(),
                              batch_size=settings.batch_size)
    trainer = _Separate(model, forward, optimizer, data, loss_fn, settings, device, generator, eval_args, graphed)
    run_epochs([state], trainer, max_epochs=settings.max_epochs, n_train=len(train_split))
    if graphed is not None:
        plan.add(graphed.counts)
    result = evaluate_best(model, forward, data, train_split, state.checkpoint_dir, run_fingerprint, run_settings,
                         eval_args=eval_args, stopper=state.stopper, epochs=state.epoch, stopped_early=state.stopped,
                         train_seconds=state.train_seconds, loop_seconds=state.loop_seconds,
                         samples_seen=state.samples_seen, history=state.history, resumed_from=state.resumed_from)
    result.cuda_graph = plan.record() if plan.requested else None
    return result


class _Separate:
    """The `EpochTrainer` of one run (epochs.py): `train_epoch` with the run's model and optimiser; the
    optimiser and the global RNGs are live, so its checkpoints store their current states."""

    def __init__(self, model: torch.nn.Module, forward: Callable[..., dict[str, torch.Tensor]],
                 optimizer: torch.optim.Optimizer, data: ProcessedData, loss_fn: MultitaskLoss, settings: RunSettings,
                 device: torch.device, generator: torch.Generator, eval_args: dict[str, Any],
                 graphed: GraphedStep | None = None) -> None:
        self.model, self.forward, self.optimizer, self.data = model, forward, optimizer, data
        self.loss_fn, self.settings, self.device, self.generator = loss_fn, settings, device, generator
        self.eval_args, self.graphed = eval_args, graphed

    def train_epoch(self, runs: list[RunState], epoch: int) -> EpochStats:
        return train_epoch(self.model, self.forward, self.optimizer, self.data.splits["train"], self.generator,
                           self.loss_fn, self.settings, self.device, epoch=epoch, graphed=self.graphed)

    def validate(self, index: int, run: RunState) -> tuple[dict[str, float], float]:
        val_metrics, _, _ = evaluate(self.model, self.forward, self.data, "val", self.data.splits["train"],
                                     **self.eval_args)
        return val_metrics, mean_metric(val_metrics)

    def saved_states(self, index: int, run: RunState) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.optimizer.state_dict(), ckpt.rng_state(self.generator)

    def regroup(self, remaining: list[RunState]) -> None:
        raise AssertionError("a separate run trains alone")  # run_epochs regroups only a stack that shrinks


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
