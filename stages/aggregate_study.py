"""aggregate_study: the MultiTab-Bench study's outputs (`make study`) from results/study_runs.

    python -m stages.aggregate_study --params params.yaml --runs results/study_runs --out results/study_report

Writes <out>/metrics.csv and curves.csv (the runs' numbers), then from those alone (multitab.evaluation.
bench.study): Figures 5 and 6 with standard-error bars, the Δm table (mean ± SE over seeds), the paper's
claim checked per configuration, the learning curves, and <out>/report.md, which leads with that section.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from multitab.config import Params, load_params
from multitab.config.aggregate import SyntheticConfig, synthetic_configs
from multitab.config.attribution import study_runs, study_settings
from multitab.evaluation.bench.attribution import collect_arms
from multitab.evaluation.bench.claim import write_claim
from multitab.evaluation.bench.numbers import StudySettings, collect
from multitab.evaluation.bench.study import write_csv, write_study, write_text
from multitab.runs.profiles import group_train, profiled
from multitab.runs.types import point_id
from stages._common import parser, run

log = logging.getLogger("stages.aggregate_study")


def collect_study(params: Params, runs: Path, configs: Mapping[str, SyntheticConfig], models: list[str],
                  seeds: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics rows, curve rows) of the study's runs: <runs>/<config>/<model>/seed<S>, or under `protocol:
    authors_code` the authors' arm's run folders <runs>/<data>/<model>/<point>/seed<S> (multitab.config.
    attribution.study_runs), read as the attribution study reads an arm's and given the study's columns."""
    members = study_runs(params)
    if members is None:
        return collect(runs, configs, models, seeds)
    arm = {"study": [(c, m, s, d, point_id(p)) for c, m, s, d, p in members]}
    metrics, curves = collect_arms(runs, configs, arm)
    return metrics.drop(columns=["arm", "run"]), curves.drop(columns=["arm"])


def data_settings(params: Params) -> str:
    """The header's words for the study's data: the held-out split, or the authors' arm's data options."""
    settings = study_settings(params)
    if settings is None:
        return "70/15/15 split"
    return ", ".join(f"{factor} {settings[factor]}" for factor in ("evaluation", "data_seed", "targets"))


def arm_note(params: Params) -> str:
    """Under `protocol: authors_code`: which arm's training options every run trains with (empty under `paper`)."""
    settings = study_settings(params)
    if settings is None:
        return ""
    name = params.attribution.authors()[0]
    options = ", ".join(f"{factor} {settings[factor]}" for factor in ("optimizer", "mask", "inter_sample", "epochs"))
    return f", with protocol authors_code's arm {name} of `attribution.arms` laid over them ({options})"


def aggregate_study(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    study = params.study
    configs = synthetic_configs({name: params.bench.configs[name] for name in study.configs})
    group = params.group(study.group)
    settings = StudySettings(model=study.claim.model, rivals=study.claim.rivals, alpha=study.claim.alpha,
                             patience=group_train(params, study.group).patience["default"])
    models = list(group.models)
    metrics, curves = collect_study(params, a.runs, configs, models, list(group.seeds))
    if metrics.empty:  # nothing to report (e.g. `make study-interim` before any run finished): write nothing
        raise FileNotFoundError(f"{a.runs}: no finished study run (<config>/<model>/seed<S>/metrics.json; "
                                "under protocol authors_code <data>/<model>/<point>/seed<S>/metrics.json) of "
                                f"study.configs x runs.{study.group}'s models and seeds; `make study` trains them")
    out = Path(a.out)
    write_csv(metrics, out / "metrics.csv")
    write_csv(curves, out / "curves.csv")
    write_claim(settings, out)  # the model under test and the labels, for the record (bench/claim.py)
    n_samples = profiled(params, "study").bench.data.n_samples
    header = [f"Scale: {n_samples:,} samples per configuration ({data_settings(params)}), seeds {list(group.seeds)}, "
              f"training settings `runs.{study.group}.train` {group.train} over `train` "
              f"(params.yaml){arm_note(params)}; "
              f"runs read from {a.runs}.", ""]
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
