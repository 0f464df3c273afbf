"""aggregate_attribution: the attribution study's report (`make attribution`) from results/attribution_runs.

    python -m stages.aggregate_attribution --params params.yaml --runs results/attribution_runs \
        --out results/attribution_report

Writes <out>/metrics.csv and curves.csv (every arm's runs' numbers, a shared run under each of its arms) and
arms.csv (the arms in order: whose, what each changes), then from those three alone (multitab.evaluation.
bench.attribution): the ladder per configuration (ladder.csv, ladder.md, figures/ladder.png), the verdict
per arm, the arm where it flips, and <out>/report.md.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pandas as pd

from multitab.config import Params, load_params
from multitab.config.aggregate import synthetic_configs
from multitab.config.attribution import arm_runs
from multitab.evaluation.bench.attribution import collect_arms, write_attribution
from multitab.evaluation.bench.claim import write_claim
from multitab.evaluation.bench.numbers import ARMS_COLUMNS, StudySettings
from multitab.evaluation.bench.study import write_csv, write_text
from multitab.runs.profiles import group_train, profiled
from multitab.runs.types import point_id
from stages._common import parser, run

log = logging.getLogger("stages.aggregate_attribution")


def arms_frame(params: Params) -> pd.DataFrame:
    rows = [{"arm": name, "source": params.attribution.arms[name].source, "changed": changed}
            for name, changed in params.attribution.changes().items()]
    return pd.DataFrame.from_records(rows, columns=ARMS_COLUMNS)


def aggregate_attribution(a: argparse.Namespace) -> None:
    params = load_params(a.params)
    attribution = params.attribution
    configs = synthetic_configs({name: params.bench.configs[name] for name in attribution.configs})
    group = params.group(attribution.group)
    settings = StudySettings(model=attribution.claim.model, rivals=attribution.claim.rivals,
                             alpha=attribution.claim.alpha,
                             patience=group_train(params, attribution.group).patience["default"])
    arms = {arm: [(c, m, s, d, point_id(p)) for c, m, s, d, p in members] for arm, members in arm_runs(params).items()}
    metrics, curves = collect_arms(a.runs, configs, arms)
    if metrics.empty:
        raise FileNotFoundError(f"{a.runs}: no finished attribution run (<data>/<model>/<point>/seed<S>/metrics.json);"
                                " `make attribution` trains them")
    out = Path(a.out)
    write_csv(metrics, out / "metrics.csv")
    write_csv(curves, out / "curves.csv")
    write_csv(arms_frame(params), out / "arms.csv")
    write_claim(settings, out)  # the model under test and the labels, for the record (bench/claim.py)
    n_samples = profiled(params, "attribution").bench.data.n_samples
    header = [f"Scale: {n_samples:,} samples per configuration, seeds {list(group.seeds)}, "
              f"models {list(group.models)}, "
              f"run group `runs.{attribution.group}` (train {group.train}) over `train`, protocol {params.protocol}; "
              f"runs read from {a.runs}.", ""]
    write_attribution(metrics, pd.read_csv(out / "arms.csv", dtype=str, keep_default_na=False), out,
                      settings, header=header)
    write_text("# MultiTab-Bench attribution report\n\n" + (out / "section.md").read_text(), out / "report.md")
    log.info("aggregate_attribution: %d arm runs -> %s",
             len(metrics.drop_duplicates(["arm", "config", "model", "seed"])), out)


def main(argv: list[str] | None = None) -> int:
    p = parser((__doc__ or "").splitlines()[0])
    p.add_argument("--runs", required=True, type=Path, help="results/attribution_runs")
    p.add_argument("--out", required=True, type=Path, help="results/attribution_report")
    a = p.parse_args(argv)
    return run("aggregate_attribution", lambda: aggregate_attribution(a), outputs=[a.out])


if __name__ == "__main__":
    raise SystemExit(main())
