"""aggregate: the paper's tables, significance tests, figures and results/report.md from the runs.

    python -m stages.aggregate --runs results/runs --complexity results/tables/complexity.csv \
        --params params.yaml --tables results/tables --figures results/figures --plots results/plots \
        --metrics results/metrics.json --report results/report.md

Reads results/runs/<dataset>/<model>/seed<S>/metrics.json (and the complexity table when present); never
trains. Paths come from dvc.yaml.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from multitab.config import ConfigError, load_params
from multitab.evaluation.config import load_aggregate_config, read_bench_configs
from multitab.evaluation.published import load_published
from multitab.evaluation.report import Outputs, build_results
from multitab.evaluation.runs import RunError, RunSet, load_runs

log = logging.getLogger("stages.aggregate")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.aggregate", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True, help="results/runs")
    ap.add_argument("--complexity", type=Path, required=True, help="results/tables/complexity.csv (may be absent)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tables", type=Path, required=True)
    ap.add_argument("--figures", type=Path, required=True)
    ap.add_argument("--plots", type=Path, required=True)
    ap.add_argument("--metrics", type=Path, required=True)
    ap.add_argument("--report", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_aggregate_config(args.params)
        synthetic = read_bench_configs(load_params(args.params), str(args.params))
        runs = RunSet(load_runs(args.runs), seeds=config.seeds)
        outputs = Outputs(tables=args.tables, figures=args.figures, plots=args.plots,
                          report=args.report, metrics=args.metrics)
        written = build_results(runs, config, load_published(), synthetic, args.complexity, outputs)
    except (ConfigError, RunError, ValueError, FileNotFoundError) as e:
        print(f"aggregate: {e}", file=sys.stderr)
        return 1
    log.info("wrote %d files, report %s", len(written), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
