"""validate_processed@<dataset>: check processed splits (or a MultiTab-Bench output) before training.

Writes the verdict (data/validated/<D>.json), which training stages depend on, only when every
expectation passes (or with --warn-only); otherwise prints a short summary and exits 1.
"""

from __future__ import annotations

import argparse
import sys

from multitab.validation import load_validation_config, validate_processed
from stages.validate_raw import finish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stages.validate_processed", description=__doc__)
    p.add_argument("--processed", required=True, help="folder with train/val/test.parquet and meta.json")
    p.add_argument("--out", required=True, help="verdict JSON (data/validated/<D>.json)")
    p.add_argument("--context", default="gx", help="Great Expectations context folder")
    p.add_argument("--report", default="reports/validation", help="Data Docs folder")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--warn-only", action="store_true", help="report failures but pass (exploration only)")
    args = p.parse_args(argv)

    cfg = load_validation_config(args.params)
    outcome = validate_processed(args.processed, cfg, context_dir=args.context, report_dir=args.report)
    return finish(outcome, args.out, warn_only=args.warn_only, max_failures=cfg.report.max_failures)


if __name__ == "__main__":
    sys.exit(main())
