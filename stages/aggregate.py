"""aggregate: the paper's tables, significance tests, figures and results/report.md from the runs.

Reads results/runs/<dataset>/<model>/seed<S>/metrics.json of the runs params.yaml declares (a run folder
left from an earlier matrix is listed and left out; a run trained under other settings is refused) and the
complexity table (when present); never trains. Every path comes from dvc.yaml's command line (params: aggregate, bench.configs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from multitab.config import load_params
from multitab.config.aggregate import synthetic_configs
from multitab.evaluation.published import load_published
from multitab.evaluation.report import Outputs, build_results
from multitab.evaluation.runs import RunSet, load_runs, select_declared
from multitab.io import all_or_nothing, remove_stale_temporaries
from stages._common import parser, run


def aggregate(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    config = params.aggregate
    synthetic = synthetic_configs(params.bench.configs if "bench" in params.sections else {})
    # exactly the runs params.yaml declares, each trained under the settings it declares now
    runs = RunSet(select_declared(load_runs(a.runs), params), seeds=config.seeds)
    outputs = Outputs(tables=a.tables, figures=a.figures, plots=a.plots, report=a.report, metrics=a.metrics)
    # Debris of a killed earlier run: its temporaries (only this stage's: label_correlations and complexity
    # write into the same folders, and may run beside it).
    for folder in (a.tables, a.figures):
        remove_stale_temporaries(folder, stems=OWN_STEMS)
    remove_stale_temporaries(a.plots)
    for path in (a.report, a.metrics):
        remove_stale_temporaries(path.parent, path.name)
    with all_or_nothing():  # every table, figure and the report: all new, or all as they were
        build_results(runs, config, load_published(), synthetic, a.complexity, outputs, runs_dir=a.runs)


# The names of this stage's files in results/tables and results/figures (dvc.yaml's outs).
OWN_STEMS = ("table", "figure5", "figure6", "comparison_with_paper", "learning_curves")


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--runs", required=True, type=Path, help="results/runs")
    p.add_argument("--complexity", required=True, type=Path, help="results/tables/complexity.csv (may be absent)")
    p.add_argument("--tables", required=True, type=Path, help="results/tables")
    p.add_argument("--figures", required=True, type=Path, help="results/figures")
    p.add_argument("--plots", required=True, type=Path, help="results/plots (data series for dvc plots)")
    p.add_argument("--metrics", required=True, type=Path, help="results/metrics.json (for dvc metrics)")
    p.add_argument("--report", required=True, type=Path, help="results/report.md")
    a = p.parse_args(argv)
    return run("aggregate", lambda: aggregate(a))


if __name__ == "__main__":
    raise SystemExit(main())
