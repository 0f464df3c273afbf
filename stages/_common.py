"""Shared argument handling and error reporting for the stage scripts (and the two validation stages)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from multitab.config import ConfigError, Params, load_params
from multitab.exit_codes import BAD_INPUT
from multitab.io import write_json

if TYPE_CHECKING:
    from multitab.validation import Outcome


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    return p


def run(stage: str, body: Callable[[], object]) -> int:
    """Run a stage body; turn library errors into one clear line on stderr (`[stage] error: ...`).

    Exit status: `BAD_INPUT` for what a retry cannot fix (ValueError, including ConfigError; KeyError; a
    missing file), 1 for the rest (other OS errors, RuntimeError such as an out-of-memory error), which
    flows.pipeline retries.
    """
    logging.basicConfig(level=logging.INFO, format=f"[{stage}] %(levelname)s %(name)s: %(message)s")
    try:
        body()
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return BAD_INPUT
    except (OSError, RuntimeError) as e:
        print(f"[{stage}] error: {e}", file=sys.stderr)
        return 1
    return 0


def add_validation_args(p: argparse.ArgumentParser) -> None:
    """The options both validation stages take."""
    p.add_argument("--out", required=True, help="verdict JSON, written only if the data passes")
    p.add_argument("--context", default="gx", help="Great Expectations context folder (default: gx)")
    p.add_argument(
        "--report", default="reports/validation", help="Data Docs folder (default: reports/validation)"
    )
    p.add_argument("--warn-only", action="store_true", help="report failures but pass (exploration only)")


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
