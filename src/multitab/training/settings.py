"""The training loop's settings (RunSettings): every one given, a run's from its record (multitab.runs.record).
Here, apart from the loop, so that the epoch machinery (epochs.py) and the loop (loop.py) both read it; beside
them the run they train (RunSpec), which the run (run.py) and its metrics record (metrics_record.py) share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class RunSettings:
    """The loop's settings, every one given (a run's come from its record: multitab.runs.record)."""

    seed: int
    max_epochs: int
    patience: int
    batch_size: int
    optimizer: Literal["adam", "adamw"]
    lr: float
    weight_decay: float
    device: Literal["auto", "cpu", "cuda"]
    precision: Literal["fp32", "tf32", "bf16"]
    compile: bool
    deterministic: bool
    progress: bool
    # the early-stopping criterion's moving-average factor (train.early_stopping_smoothing); None: the raw
    # per-epoch value, the paper's rule (early_stopping.py)
    early_stopping_smoothing: float | None
    # Test hook: called after every optimiser step with (epoch, step); lets a test kill a run mid-epoch.
    on_step: Callable[[int, int], None] | None = field(compare=False)
    # train.cuda_graph: full batches replay one captured step on CUDA (graphs.py); numbers as without it
    cuda_graph: bool = False
    # train.eval_batch_size: the evaluation batch of models whose rows do not see each other (evaluate.py)
    eval_batch_size: int | None = None


@dataclass(frozen=True)
class RunSpec:
    """The run: its dataset, model and seed, the processed data it reads and the folder of its checkpoints."""

    dataset: str
    model: str
    seed: int
    data_path: Path
    checkpoint_dir: Path
