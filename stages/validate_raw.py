"""validate_raw@<dataset>: check the canonical split files (data/splits/<D>) before preprocessing.

Writes the verdict (data/validated/<D>.raw.json) only when every check passes, apart from the check groups
that params.yaml's validation.policy.<D> sets to `warn` (listed in the verdict's `warnings`), or with
--warn-only; otherwise prints a short summary and exits with multitab.exit_codes.BAD_INPUT (a deterministic
failure: the flow does not retry it). Data Docs (reports/validation/) are written either way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from multitab.config import ConfigError, Params, load_params
from multitab.datasets.schema import get_schema
from multitab.exit_codes import BAD_INPUT
from multitab.io import write_json
from multitab.validation import Outcome, validate_raw
from stages._common import parser


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="verdict JSON, written only if the data passes")
    p.add_argument("--context", default="gx", help="Great Expectations context folder (default: gx)")
    p.add_argument(
        "--report", default="reports/validation", help="Data Docs folder (default: reports/validation)"
    )
    p.add_argument("--warn-only", action="store_true", help="report failures but pass (exploration only)")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--splits", required=True, help="folder with train/val/test.parquet (data/splits/<D>)")
    add_common(p)
    a = p.parse_args(argv)

    def body(params: Params) -> Outcome:
        return validate_raw(
            a.splits,
            get_schema(a.dataset),
            params.dataset(a.dataset),
            params.validation,
            context_dir=a.context,
            report_dir=a.report,
        )

    return run_validation(f"validate_raw@{a.dataset}", body, a.out, a.warn_only, a.params)


def run_validation(stage: str, body: Callable[[Params], Outcome], out: str, warn_only: bool, params_path: str) -> int:
    """Read params (once), run a validation; print its summary; write the verdict on success (or
    --warn-only); exit status."""
    logging.basicConfig(level=logging.INFO, format=f"[{stage}] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    try:
        params = load_params(params_path)
        outcome = body(params)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return BAD_INPUT
    except OSError as e:  # may be transient (a full disk, a network folder): retried
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return 1
    max_failures = params.validation.report.max_failures
    print(outcome.summary(max_failures), file=sys.stdout if outcome.success else sys.stderr)
    if outcome.success or warn_only:
        write_json(out, outcome.verdict(warn_only=warn_only))
        if not outcome.success:
            print(f"[{stage}] --warn-only: verdict {out} written with success=false", file=sys.stderr)
        return 0
    print(
        f"[{stage}] no verdict written ({out}): fix the data, or the thresholds in params.yaml (validation:)",
        file=sys.stderr,
    )
    # Last, one line the orchestration reports as the cause: the first failed expectation.
    fails = outcome.failures
    more = f" (and {len(fails) - 1} more)" if len(fails) > 1 else ""
    print(f"[{stage}] error: validation failed: {fails[0].line()}{more}", file=sys.stderr)
    return BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
