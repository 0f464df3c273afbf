"""validate_raw@<dataset>: check the canonical split files (data/splits/<D>) before preprocessing.

Writes the verdict (data/validated/<D>.raw.json) only when every check passes, apart from the check groups
that params.yaml's validation.policy.<D> sets to `warn` (listed in the verdict's `warnings`), or with
--warn-only; otherwise prints a short summary and exits with multitab.runtime.exit_codes.BAD_INPUT (a deterministic
failure: the flow does not retry it). Data Docs (reports/validation/) are written either way.
"""

from __future__ import annotations

from multitab.config import Params
from multitab.datasets.declared import record, stage_schema
from multitab.validation import Outcome, validate_raw
from multitab.validation.report_page import write_declared
from stages._common import add_validation_args, parser, run_validation


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--dataset", required=True)
    p.add_argument("--splits", required=True, help="folder with train/val/test.parquet (data/splits/<D>)")
    add_validation_args(p)
    a = p.parse_args(argv)

    def body(params: Params) -> Outcome:
        declared = record(params.dataset(a.dataset), a.splits)
        if declared is not None:  # the validation page shows what was declared and inferred
            write_declared(a.report, declared)
        return validate_raw(
            a.splits,
            stage_schema(a.dataset, params.dataset(a.dataset), a.splits),
            params.dataset(a.dataset),
            params.validation,
            context_dir=a.context,
            report_dir=a.report,
        )

    return run_validation(f"validate_raw@{a.dataset}", body, a.out, a.warn_only, a.params)


if __name__ == "__main__":
    raise SystemExit(main())
