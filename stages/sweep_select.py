"""sweep_select: the hyperparameter sweeps' selection and report (`make sweep`) from results/sweep_runs.

    python -m stages.sweep_select --params params.yaml --sweeps results/sweep_runs \
        --selected hparams/swept.yaml --out results/sweeps

Reads every grid point of params.yaml's `sweep` (stages sweep_<family>@..., their metrics.json), selects
per dataset and model on the mean validation metric over the sweep's seeds (ties: the first point in the
grid's order; multitab.evaluation.sweep), and writes the selections to hparams/swept.yaml (the authors'
format; `train.hparams: swept` trains with them) and <out>/report.md, points.csv, selection.json and one
figure per dataset and model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from multitab.config import load_params
from multitab.evaluation.sweep import collect, write_sweep_outputs
from multitab.profiles import profiled
from stages._common import parser, run

log = logging.getLogger("stages.sweep_select")


def sweep_select(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    sweep = params.sweep
    sweeps = collect(a.sweeps, sweep)
    if not sweeps:
        raise ValueError(f"{a.params}: sweep: no family lists a dataset and a model; nothing to select")
    train = profiled(params, "sweep").train
    header = (f"Grid points trained with `sweep.train` {sweep.train} over `train` (max_epochs {train.max_epochs}, "
              f"max_train_rows {train.max_train_rows}, batch {train.batch_size}, patience {dict(train.patience)}), "
              f"protocol `{params.protocol}`; runs read from {a.sweeps}.")
    summary = write_sweep_outputs(sweeps, selected_path=a.selected, out=a.out, protocol=params.protocol, header=header)
    for dataset, models in summary.items():
        for model, s in models.items():
            log.info("sweep_select: %s on %s: %s (val %s) of %d points", model, dataset, s["point"], s["val_mean"],
                     s["n_points"])


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--sweeps", required=True, type=Path, help="results/sweep_runs (the grid points' runs)")
    p.add_argument("--selected", required=True, type=Path, help="hparams/swept.yaml")
    p.add_argument("--out", required=True, type=Path, help="results/sweeps")
    a = p.parse_args(argv)
    return run("sweep_select", lambda: sweep_select(a), outputs=[a.selected, a.out])


if __name__ == "__main__":
    raise SystemExit(main())
