"""validate_processed@<dataset>: check processed splits (data/processed/<D>, or a MultiTab-Bench output in
the same format) before training.

Writes the verdict (data/validated/<D>.json), which training stages depend on, only when every expectation
passes (or with --warn-only); otherwise prints a short summary and exits with BAD_INPUT (not retried).
"""

from __future__ import annotations

from pathlib import Path

from multitab.config import Params
from multitab.files.io import read_json
from multitab.validation import Outcome, validate_processed
from stages._common import add_validation_args, parser, run_validation


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--processed", required=True, help="folder with train/val/test.parquet and meta.json")
    add_validation_args(p)
    a = p.parse_args(argv)

    def body(params: Params) -> Outcome:
        return validate_processed(a.processed, params.validation, context_dir=a.context, report_dir=a.report)

    meta = Path(a.processed) / "meta.json"
    name = read_json(meta).get("dataset", Path(a.processed).name) if meta.exists() else Path(a.processed).name
    return run_validation(f"validate_processed@{name}", body, a.out, a.warn_only, a.params)


if __name__ == "__main__":
    raise SystemExit(main())
