"""Training: tensor data path (data.py), losses, early stopping, checkpoints, the loop, and one run end
to end (run.py) with its metrics record (metrics_record.py). Imports only torch, numpy, pandas/pyarrow and
scikit-learn: runs where DVC, Prefect and Great Expectations are not installed."""

from multitab.training.data import ProcessedData, TensorSplit, iterate_batches, load_processed
from multitab.training.early_stopping import EarlyStopping
from multitab.training.loop import RunResult, train
from multitab.training.losses import MultitaskLoss, task_loss
from multitab.training.metrics_record import METRICS_SCHEMA
from multitab.training.run import RunSpec, run_training
from multitab.training.settings import RunSettings

__all__ = [
    "METRICS_SCHEMA", "EarlyStopping", "MultitaskLoss", "ProcessedData", "RunResult", "RunSettings", "RunSpec",
    "TensorSplit", "iterate_batches", "load_processed", "run_training",
    "task_loss", "train",
]
