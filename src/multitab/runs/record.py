"""What one run trains with, complete: the record `python -m multitab.runs` resolves for it (multitab.runs.resolve) and
writes into runs.yaml, read back as typed values. Every field is required and nothing here or downstream supplies
a default: a key missing from the record is an error naming it.

    hparams:    # multitab.hparams.Hparams.record(): the file, its selection, the grid point, the constructor
      ...       # keywords (`model`) and the optimiser (`optim`: optimizer, lr, weight_decay, the file's max_epochs)
    train:      # TrainSettings: the epoch budget, patience, batch, rows, precision, device ...
      ...
    progress:   # the progress bar
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from multitab.files.yaml_data import short_repr
from multitab.hparams import Hparams, tuples
from multitab.runs.profiles import plain


class RecordError(ValueError):
    """A run's record (runs.yaml) lacks a key or has one more: runs.yaml is not what this code writes."""


@dataclass(frozen=True)
class TrainSettings:
    """A run's training settings, resolved (`train` of its record)."""

    max_epochs: int | None  # the epoch budget: train.max_epochs, else the file's optim.max_epochs; None: trains itself
    patience: int  # early stopping: epochs without improvement (train.patience.<dataset>, else `default`)
    batch_size: int
    max_train_rows: int | None  # the first rows of the training split; None: all
    precision: Literal["fp32", "tf32", "bf16"]
    device: Literal["auto", "cpu", "cuda"]
    compile: bool
    cuda_graph: bool  # replay a captured training step on CUDA (training/graphs.py); changes no number
    eval_batch_size: int | None  # evaluation batch of models whose rows do not see each other; None: batch_size
    deterministic: bool
    num_threads: int  # 0: the library's default
    early_stopping_smoothing: float | None
    xgboost_early_stopping_rounds: int
    protocol: str
    # the constructor keywords params.yaml lays over the file (train.model_overrides, the variant's, an arm's):
    # already in `hparams.model`; the checkpoint's fingerprint names them
    overrides: dict[str, Any]


@dataclass(frozen=True)
class RunConfig:
    """Everything one run trains with: its hyperparameters and its training settings."""

    hparams: Hparams
    train: TrainSettings
    progress: bool  # a tqdm bar per epoch (changes no number)

    @property
    def optim(self) -> dict[str, Any] | None:
        """optimizer, lr, weight_decay (None: a model that trains itself)."""
        if self.hparams.optim is None:
            return None
        return {k: self.hparams.optim[k] for k in ("optimizer", "lr", "weight_decay")}

    def record(self) -> dict[str, Any]:
        """The record's `hparams` and `train` (runs.yaml's, plain values)."""
        return plain({"hparams": self.hparams.record(), "train": dataclasses.asdict(self.train)})

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> RunConfig:
        """The typed view of a record's `hparams` and `train`; RecordError naming `where` (the run) and the key."""
        hp = _exact(record.get("hparams"), ("file", "source", "point", "model", "optim"), f"{where}: hparams")
        train = _exact(record.get("train"), [f.name for f in dataclasses.fields(TrainSettings)], f"{where}: train")
        hints = typing.get_type_hints(TrainSettings)
        for key, value in train.items():
            if not _fits(hints[key], value):
                raise RecordError(f"{where}: train.{key}: {short_repr(value)} is not of type {hints[key]}")
        hparams = Hparams(model=tuples(dict(hp["model"])), optim=None if hp["optim"] is None else dict(hp["optim"]),
                          file=str(hp["file"]), point=None if hp["point"] is None else dict(hp["point"]))
        progress = record.get("progress")
        if not isinstance(progress, bool):
            raise RecordError(f"{where}: progress: {short_repr(progress)} is not true or false (runs.yaml is not what "
                              "this code writes: run `python -m multitab.runs`)")
        return cls(hparams=hparams, train=TrainSettings(**{**train, "overrides": dict(train["overrides"])}),
                   progress=progress)


def _exact(value: Any, keys: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(f"{where}: missing (runs.yaml is older than this code: run `python -m multitab.runs`)")
    missing, extra = sorted(set(keys) - set(value)), sorted(set(value) - set(keys))
    if missing or extra:
        raise RecordError(f"{where}: keys {missing} missing, {extra} unknown (runs.yaml is not what this code "
                          "writes: run `python -m multitab.runs`)")
    return dict(value)


def _fits(annotation: Any, value: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return value in args
    if args and origin is not dict:  # X | None
        return any(value is None if a is type(None) else _fits(a, value) for a in args)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict:
        return isinstance(value, Mapping)
    return isinstance(value, annotation)
