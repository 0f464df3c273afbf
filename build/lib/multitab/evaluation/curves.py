"""Learning curves: the per-epoch dvclive logs of the training runs, averaged over seeds per model.

A training run writes results/runs/<dataset>/<model>/seed<S>/dvclive/plots/metrics/<name>.tsv (columns
`timestamp`, `step`, `<name>`; step 0 = first epoch). For each dataset and model this module averages a
curve over the seeds that reached each step (runs stopped early contribute to the steps they reached), and
lays the models side by side: one column per model, empty where no seed reached the step, so `dvc plots`
draws one line per model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)

CURVES = ("val_mean", "train_loss")  # the validation early-stopping criterion and the training loss


def read_curve(run_dir: Path, name: str) -> pd.Series | None:
    """step -> value of one run's dvclive curve `name`; None when the run has no such log."""
    path = run_dir / "dvclive" / "plots" / "metrics" / f"{name}.tsv"
    if not path.is_file():
        return None
    frame = pd.read_csv(path, sep="\t")
    if "step" not in frame.columns or name not in frame.columns:
        raise ValueError(f"{path}: expected columns 'step' and {name!r}, got {list(frame.columns)}")
    return frame.set_index("step")[name].astype(float)


def seed_mean_curves(runs_dir: str | Path, dataset: str, models: Sequence[str], labels: Sequence[str],
                     seeds: Sequence[int], name: str) -> pd.DataFrame:
    """Index = step, one column per label (every label present, NaN where no seed reached that step)."""
    columns = {}
    for model, label in zip(models, labels):
        curves = [c for s in seeds
                  if (c := read_curve(Path(runs_dir) / dataset / model / f"seed{s}", name)) is not None]
        columns[label] = pd.concat(curves, axis=1).mean(axis=1) if curves else pd.Series(dtype=float)
    frame = pd.DataFrame(columns)
    frame.index.name = "step"
    return frame.sort_index()
