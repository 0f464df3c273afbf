"""aggregate_study: the MultiTab-Bench study's outputs (`make study`) from results/study_runs.

    python -m stages.aggregate_study --params params.yaml --runs results/study_runs --out results/study_report

Writes <out>/metrics.csv and curves.csv (the runs' numbers), then from those alone (multitab.evaluation.
bench.study): Figures 5 and 6 with standard-error bars, the Δm table (mean ± σ over seeds), the paper's
claim checked per configuration, the learning curves, and <out>/report.md, which leads with that section.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from multitab.config import load_params
from multitab.config.aggregate import synthetic_configs
from multitab.evaluation.bench.numbers import StudySettings, collect
from multitab.evaluation.bench.study import write_csv, write_study, write_text
from multitab.profiles import group_train, profiled
from stages._common import parser, run

log = logging.getLogger("stages.aggregate_study")


def aggregate_study(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    study = params.study
    configs = synthetic_configs({name: params.bench.configs[name] for name in study.configs})
    labels = dict(params.aggregate.models) if "aggregate" in params.sections else {}
    group = params.group(study.group)
    settings = StudySettings(model=study.claim.model, rivals=study.claim.rivals, alpha=study.claim.alpha,
                             labels={**StudySettings().labels, **labels},
                             patience=group_train(params, study.group).patience["default"])
    models = list(group.models)
    metrics, curves = collect(a.runs, configs, models, list(group.seeds))
    if metrics.empty:  # nothing to report (e.g. `make study-interim` before any run finished): write nothing
        raise FileNotFoundError(f"{a.runs}: no finished study run (<config>/<model>/seed<S>/metrics.json) of "
                                f"study.configs x runs.{study.group}'s models and seeds; `make study` trains them")
    out = Path(a.out)
    write_csv(metrics, out / "metrics.csv")
    write_csv(curves, out / "curves.csv")
    n_samples = profiled(params, "study").bench.data.n_samples
    header = [f"Scale: {n_samples:,} samples per configuration (70/15/15 split), seeds {list(group.seeds)}, "
              f"training settings `runs.{study.group}.train` {group.train} over `train` (params.yaml); runs read from "
              f"{a.runs}.", ""]
    _, section = write_study(metrics, curves, out, settings, header=header, models=models)
    write_text("# MultiTab-Bench study report\n\n" + section, out / "report.md")
    log.info("aggregate_study: %d runs -> %s", len(metrics.drop_duplicates(["config", "model", "seed"])), out)


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--runs", required=True, type=Path, help="results/study_runs")
    p.add_argument("--out", required=True, type=Path, help="results/study_report")
    a = p.parse_args(argv)
    return run("aggregate_study", lambda: aggregate_study(a), outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
