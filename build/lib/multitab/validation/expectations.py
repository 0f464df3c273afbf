"""Expectations multitab evaluates itself, published in Great Expectations' suites and validation results.

Four checks need more than the one split GX validates at a time, or a pass GX's pandas engine does not make:
rows repeating an earlier row of the split (`duplicates`, whole rows hashed), val/test rows identical to a
train row (`overlap`), a class of a multiclass task absent from every split (`class_absent`) and regression
targets outside bounds fitted on train (`target_range`). validate.extra_checks evaluates them with numpy (an
`OwnCheck` each); the runner adds them to their split's suite and validation result, so that Data Docs show
and count every check the project's page counts.

Defining the classes registers their expectation types with GX, whose pages render an expectation through
its class: Data Docs holding them build in a process that imported this module (the validation stages do).
GX's engine cannot evaluate them (`_validate` says so); the stored suites are rebuilt by every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from great_expectations.core import ExpectationValidationResult
from great_expectations.expectations.expectation import BatchExpectation, ColumnAggregateExpectation

from multitab.validation.failures import Failure


class _ByMultitab:
    """An expectation validate.extra_checks evaluates: Great Expectations' engine cannot."""

    expectation_type: ClassVar[str]

    def _validate(
        self, metrics: dict, runtime_configuration: dict | None = None, execution_engine: Any = None
    ) -> dict:
        raise NotImplementedError(
            f"{self.expectation_type} is evaluated by multitab.validation (validate.extra_checks), not by "
            "Great Expectations' engine"
        )


class ExpectTableRowsToBeUnique(_ByMultitab, BatchExpectation):
    """At most `max_fraction` of the split's rows repeat an earlier row of the split."""

    title: ClassVar[str] = "duplicate rows (multitab)"
    max_fraction: float
    success_keys: ClassVar[tuple[str, ...]] = ("max_fraction",)


class ExpectTableRowsToNotBeInTrain(_ByMultitab, BatchExpectation):
    """At most `max_fraction` of a val or test split's rows are identical to a train row (leakage)."""

    title: ClassVar[str] = "rows also in train (multitab)"
    max_fraction: float
    success_keys: ClassVar[tuple[str, ...]] = ("max_fraction",)


class ExpectColumnClassesToOccurInSomeSplit(_ByMultitab, ColumnAggregateExpectation):
    """Every class 0..n_classes-1 of a multiclass label occurs in train, val or test."""

    title: ClassVar[str] = "every class present (multitab)"
    n_classes: int
    success_keys: ClassVar[tuple[str, ...]] = ("n_classes",)


class ExpectColumnValuesToBeWithinTrainBounds(_ByMultitab, ColumnAggregateExpectation):
    """Every finite value of a regression target in [min_value, max_value], bounds fitted on train."""

    title: ClassVar[str] = "target within robust train bounds (multitab)"
    min_value: float
    max_value: float
    success_keys: ClassVar[tuple[str, ...]] = ("min_value", "max_value")


@dataclass(frozen=True)
class OwnCheck:
    """One evaluated check: its expectation (what was expected), GX's result fields (what was observed) and,
    if it failed, the Failure the summary prints."""

    expectation: BatchExpectation
    result: dict[str, Any]
    failure: Failure | None = None

    def validation_result(self) -> ExpectationValidationResult:
        """The check as GX records an evaluated expectation (after the expectation joined its suite: the
        configuration then carries the id that links result and suite)."""
        return ExpectationValidationResult(
            success=self.failure is None,
            expectation_config=self.expectation.configuration,
            result=self.result,
        )


def counted(n_rows: int, idx: np.ndarray, k: int, values: Sequence[Any] = ()) -> dict[str, Any]:
    """GX's result fields of a check that counts offending rows: `idx`, their row numbers among `n_rows`;
    the first `k` row numbers (and `values`, their values) as samples."""
    return {
        "element_count": n_rows,
        "unexpected_count": len(idx),
        "unexpected_percent": 100 * len(idx) / n_rows if n_rows else 0.0,
        "partial_unexpected_index_list": [int(i) for i in idx[:k]],
        "partial_unexpected_list": [float(v) for v in values[:k]],
    }
