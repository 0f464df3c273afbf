"""sweep_select: the hyperparameter sweeps' selection and report (`make sweep`) from results/sweep_runs.

    python -m stages.sweep_select --params params.yaml --sweeps results/sweep_runs \
        --selected hparams/swept --out results/sweeps

Reads every grid point of params.yaml's sweep groups (`runs.<group>.sweep`; their metrics.json), selects
per dataset and model on the mean validation metric over the sweep's seeds (ties: the first point in the
grid's order; multitab.evaluation.sweep), and writes the selections to hparams/swept/<dataset>/<model>.yaml
(multitab.hparams' files; `train.hparams: swept` trains with them) and <out>/report.md, points.csv,
selection.json and one figure per dataset and model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from multitab.config import load_params
from multitab.evaluation.sweep import collect
from multitab.evaluation.sweep_report import write_sweep_outputs
from multitab.runs.locate import data_names
from multitab.runs.profiles import group_train
from stages._common import parser, run

log = logging.getLogger("stages.sweep_select")


def sweep_select(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    groups = {name: g for name, g in params.runs.items() if g.sweep is not None}
    elsewhere = [f"runs.{name}.out={g.out}" for name, g in groups.items() if Path(g.out) != Path(a.sweeps)]
    if elsewhere:
        raise ValueError(f"{a.params}: sweep groups write outside {a.sweeps}: {elsewhere}; set their `out` to it")
    sweeps = collect(a.sweeps, groups, data_names(params), Path(a.params).parent)
    if not sweeps:
        raise ValueError(f"{a.params}: runs: no sweep group lists a dataset and a model; nothing to select")
    header = " ".join(
        f"Group {name}: grid points trained with `runs.{name}.train` {groups[name].train} over `train` "
        f"(max_epochs {t.max_epochs}, max_train_rows {t.max_train_rows}, batch {t.batch_size}, patience "
        f"{dict(t.patience)})." for name, t in ((n, group_train(params, n)) for n in groups)
    ) + f" Protocol `{params.protocol}`; runs read from {a.sweeps}."
    summary = write_sweep_outputs(sweeps, selected_path=a.selected, out=a.out, protocol=params.protocol, header=header)
    for dataset, models in summary.items():
        for model, s in models.items():
            log.info("sweep_select: %s on %s: %s (val %s) of %d points", model, dataset, s["point"], s["val_mean"],
                     s["n_points"])


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--sweeps", required=True, type=Path, help="results/sweep_runs (the grid points' runs)")
    p.add_argument("--selected", required=True, type=Path, help="hparams/swept (a folder, replaced whole)")
    p.add_argument("--out", required=True, type=Path, help="results/sweeps")
    a = p.parse_args(argv)
    return run("sweep_select", lambda: sweep_select(a), outputs=[a.selected, a.out])


if __name__ == "__main__":
    raise SystemExit(main())
