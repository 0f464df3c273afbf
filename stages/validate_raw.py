"""validate_raw@<dataset>: check the canonical split files before preprocessing.

Writes the verdict (data/validated/<D>.raw.json) only when every expectation passes (or with
--warn-only); otherwise prints a short summary and exits 1. Data Docs are written either way.
"""

from __future__ import annotations

import argparse
import sys

from multitab.datasets.config import load_dataset_config
from multitab.datasets.schema import get_schema
from multitab.io import write_json
from multitab.validation import load_validation_config, validate_raw


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stages.validate_raw", description=__doc__)
    p.add_argument("--dataset", required=True)
    p.add_argument("--splits", required=True, help="folder with train/val/test.parquet (data/splits/<D>)")
    p.add_argument("--out", required=True, help="verdict JSON (data/validated/<D>.raw.json)")
    p.add_argument("--context", default="gx", help="Great Expectations context folder")
    p.add_argument("--report", default="reports/validation", help="Data Docs folder")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--warn-only", action="store_true", help="report failures but pass (exploration only)")
    args = p.parse_args(argv)

    cfg = load_validation_config(args.params)
    outcome = validate_raw(
        args.splits,
        get_schema(args.dataset),
        load_dataset_config(args.dataset, args.params),
        cfg,
        context_dir=args.context,
        report_dir=args.report,
    )
    return finish(outcome, args.out, warn_only=args.warn_only, max_failures=cfg.report.max_failures)


def finish(outcome, out: str, *, warn_only: bool, max_failures: int) -> int:  # type: ignore[no-untyped-def]
    """Print the summary; write the verdict on success (or --warn-only); the exit status."""
    print(outcome.summary(max_failures), file=sys.stdout if outcome.success else sys.stderr)
    if outcome.success or warn_only:
        write_json(out, outcome.verdict(warn_only=warn_only))
        if not outcome.success:
            print(f"--warn-only: verdict {out} written with success=false", file=sys.stderr)
        return 0
    print(
        f"no verdict written ({out}): fix the data or the thresholds in params.yaml (validation:)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
