"""Data validation with Great Expectations: suites built from the dataset registry, Data Docs, verdicts.

Only the validation stages import this package; the training path never does (it must run without
great_expectations installed).
"""

from multitab.validation.failures import Failure, Outcome
from multitab.validation.runner import open_context
from multitab.validation.validate import expected_rows, validate_processed, validate_raw

__all__ = [
    "Failure",
    "Outcome",
    "expected_rows",
    "open_context",
    "validate_processed",
    "validate_raw",
]
