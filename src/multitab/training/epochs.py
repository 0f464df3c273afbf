"""The epoch loop of a run, shared by a separate run (loop.py) and a stack of seeds (stacked.py).

    state, last = start_run(model, checkpoint_dir, fingerprint, run_settings, settings, generator)
    run_epochs([state, ...], trainer, max_epochs=..., n_train=...)

A run's progress between epochs (`RunState`: early stopping, history, epoch, timing) is what its `last.pt`
holds; `start_run` restores it from there. `run_epochs` trains runs that stand at the same epoch, epoch by
epoch, until each has stopped early or reached the budget. Per epoch: one `trainer.train_epoch` over every
run still training, then per run, in order: the finite-loss check, validation (`trainer.validate`), early
stopping, its history row, its log line, `best.pt` on improvement and `last.pt` always.

What differs between a separate run and a stack is the trainer (`EpochTrainer`): how an epoch trains (one
model and its optimiser, or the vmapped step of all members), how a run's model is brought up to date
before validation, what optimiser and RNG states its `last.pt` stores, and what happens when runs finish
while others go on (a stack is built again from the others). A stack's timing fields are each member's
share: the epoch's training time divided by the runs in it, plus the member's own validation.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

import multitab.training.checkpoint as ckpt
from multitab.training.early_stopping import EarlyStopping
from multitab.training.settings import RunSettings

log = logging.getLogger(__name__)

__all__ = ["EpochStats", "EpochTrainer", "RunState", "history_row", "run_epochs", "save_epoch", "smoothed_note",
           "start_run"]


@dataclass
class EpochStats:
    loss_sum: torch.Tensor  # summed batch losses (float64, on the device): a scalar, or one per run of a stack
    task_sums: dict[str, torch.Tensor]  # the same per task
    n_batches: int
    n_samples: int
    seconds: float  # wall time of the epoch (CUDA synchronised at the end)
    data_seconds: float  # host time spent producing batches (the data path), inside `seconds`


@dataclass
class RunState:
    """One run's progress between epochs, as its `last.pt` stores it."""

    model: nn.Module
    checkpoint_dir: Path
    run_fingerprint: str
    run_settings: dict[str, Any] | None
    generator: torch.Generator  # the batch order's
    stopper: EarlyStopping
    name: str = ""  # in log lines and errors: "seed 3" for a stack member, nothing for a separate run
    history: list[dict[str, float]] = field(default_factory=list)
    epoch: int = 0  # epochs done
    resumed_from: int = 0
    stopped: bool = False  # stopped early
    train_seconds: float = 0.0
    loop_seconds: float = 0.0
    samples_seen: int = 0
    # What last.pt stores that a separate run keeps live (its optimiser, the global RNGs) and a stack member
    # keeps here: its optimiser state between two stacks (None: fresh), the global RNG states after its build.
    optimizer_state: dict[str, Any] | None = None
    rng: dict[str, Any] | None = None

    @property
    def prefix(self) -> str:
        return f"{self.name}, " if self.name else ""

    def finished(self, max_epochs: int) -> bool:
        return self.stopped or self.epoch >= max_epochs


def start_run(
    model: nn.Module, checkpoint_dir: Path, run_fingerprint: str, run_settings: dict[str, Any] | None,
    settings: RunSettings, generator: torch.Generator, name: str = "",
) -> tuple[RunState, dict[str, Any] | None]:
    """A run from scratch, or from its `last.pt` when it matches (`checkpoint.resume`): the model's weights
    and the batch generator restored, and the checkpoint returned for the optimiser and RNG states, which
    the caller restores where it keeps them."""
    state = RunState(model, Path(checkpoint_dir), run_fingerprint, run_settings, generator,
                     EarlyStopping(settings.patience, smoothing=settings.early_stopping_smoothing), name)
    last = ckpt.resume(state.checkpoint_dir, run_fingerprint, run_settings)
    if last is None:
        return state, None
    model.load_state_dict(last["model"])
    generator.set_state(last["rng"]["batches"])
    state.stopper = EarlyStopping.resume(last["early_stopping"], settings.early_stopping_smoothing)
    state.history = list(last["history"])
    state.epoch = state.resumed_from = int(last["epoch"])
    state.train_seconds, state.loop_seconds = float(last["train_seconds"]), float(last["loop_seconds"])
    state.samples_seen = int(last["samples_seen"])
    state.stopped = bool(last.get("stopped", False))
    log.info("%sresuming from %s after epoch %d", state.prefix, state.checkpoint_dir / ckpt.LAST, state.epoch)
    return state, last


class EpochTrainer(Protocol):
    """What differs between a separate run and a stack of runs (module docstring)."""

    def train_epoch(self, runs: list[RunState], epoch: int) -> EpochStats:
        """One epoch (0-based `epoch`) of every run in `runs`; a stack's sums hold one value per run, in order."""

    def validate(self, index: int, run: RunState) -> tuple[dict[str, float], float]:
        """`run` (at `index` in the last `train_epoch`'s runs) brought up to date with the epoch and validated:
        its validation metrics and their mean, the early-stopping criterion."""

    def saved_states(self, index: int, run: RunState) -> tuple[dict[str, Any], dict[str, Any]]:
        """The optimiser state and the RNG states (`checkpoint.rng_state`'s layout) its `last.pt` stores."""

    def regroup(self, remaining: list[RunState]) -> None:
        """Some runs finished: from the next epoch on, train only `remaining` (a non-empty subset, in order)."""


def run_epochs(runs: list[RunState], trainer: EpochTrainer, *, max_epochs: int, n_train: int,
               stacked: bool = False) -> None:
    """Train `runs`, which stand at the same epoch, until each has stopped early or done `max_epochs`;
    `n_train` is the training split's size. Each run's state, history and checkpoints are its own."""
    active = [r for r in runs if not r.finished(max_epochs)]
    if not active:
        return
    epoch = active[0].epoch
    while active:
        m = len(active)
        t0 = time.perf_counter()
        stats = trainer.train_epoch(active, epoch)
        share = (time.perf_counter() - t0) / m
        n_batches = max(stats.n_batches, 1)
        loss_sums = stats.loss_sum.reshape(-1).tolist()
        task_sums = {k: v.reshape(-1).tolist() for k, v in stats.task_sums.items()}
        for i, run in enumerate(active):
            t1 = time.perf_counter()
            train_loss = loss_sums[i] / n_batches
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"{run.prefix}epoch {epoch + 1}: training loss is {train_loss}; lower the "
                                         "learning rate (train.optim) or check the data")
            val_metrics, val_mean = trainer.validate(i, run)
            improved = run.stopper.step(val_mean, epoch)
            epoch_seconds = share + time.perf_counter() - t1
            run.train_seconds += epoch_seconds
            run.loop_seconds += stats.seconds / m
            run.samples_seen += n_train
            row = history_row(epoch, train_loss, {k: v[i] / n_batches for k, v in task_sums.items()}, val_metrics,
                              val_mean, epoch_seconds=epoch_seconds, data_seconds=stats.data_seconds / m,
                              loop_seconds=stats.seconds / m, n_train=n_train,
                              criterion=run.stopper.history_fields(val_mean))
            run.history.append(row)
            log.info("%sepoch %d: train loss %.4f, val mean %.4f%s%s, %.0f samples/s%s", run.prefix, epoch + 1,
                     train_loss, val_mean, smoothed_note(row), " (best)" if improved else "",
                     row["samples_per_second"], f" ({m} stacked)" if stacked else "")
            run.epoch = epoch + 1
            run.stopped = run.stopper.should_stop
            optimizer_state, rng = trainer.saved_states(i, run)
            save_epoch(run.checkpoint_dir, run.run_fingerprint, run.run_settings, epoch=run.epoch, improved=improved,
                       model_state=run.model.state_dict(), val_metrics=val_metrics, optimizer_state=optimizer_state,
                       rng=rng, stopper=run.stopper, history=run.history, stopped=run.stopped,
                       train_seconds=run.train_seconds, loop_seconds=run.loop_seconds, samples_seen=run.samples_seen)
            if run.stopped:
                log.info("%searly stop after epoch %d: no improvement for %d epochs (best epoch %d)", run.prefix,
                         run.epoch, run.stopper.patience, run.stopper.best_epoch + 1)
        epoch += 1
        remaining = [r for r in active if not r.finished(max_epochs)]
        if remaining and len(remaining) < m:
            trainer.regroup(remaining)
        active = remaining


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
