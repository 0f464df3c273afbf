"""Great Expectations on a split too large to hold: its suite validated batch by batch (columns.py: the
table's expectations, then a few columns at a time), the results put back together as the one validation
result GX gives for the whole frame (`ValidationDefinition.run`: the same results, statistics and run
fields, and the whole split's fingerprint). tests/test_validation_batched.py compares the two.

GX fingerprints each frame it is given (`pandas_data_fingerprint`: pandas' row hashes, index included, of
every column; skipped from HASH_THRESHOLD bytes on). Per batch that hashed each column with the row index
again, and the table's frame of every column (the whole split's rows once more): at 11 M rows it was most of
validate_processed's time, for a fingerprint of a frame of zeros. Batches are not fingerprinted; the merged
result holds the whole split's, hashed a column at a time, where GX would give one."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import great_expectations as gx
from great_expectations.constants import DATAFRAME_REPLACEMENT_STR
from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.execution_engine import pandas_execution_engine
from great_expectations.validator.v1_validator import Validator
from great_expectations.validator.validation_statistics import calc_validation_statistics

from multitab.validation.columns import SplitData, row_hashes
from multitab.validation.failures import Failure, failure_from_result


def run_in_batches(
    batch_definition: Any,
    validation_id: str | None,
    suite: gx.ExpectationSuite,
    data: SplitData,
    split: str,
    *,
    run_id: RunIdentifier,
    result_format: Mapping[str, Any],
    offending_rows: int,
) -> tuple[ExpectationSuiteValidationResult, list[Failure]]:
    """Validate `data` with `suite` (saved: its expectations have ids) batch by batch; the merged result and
    the failures of its failed expectations in the result's order, found while each batch's frame is held.

    Order as GX's (Validator.graph_validate): first the expectations whose metrics could not be computed (a
    missing column, a mean of text: their exception_info is keyed by metric), then the others, each in the
    suite's order."""
    by_id: dict[str, ExpectationValidationResult] = {}
    failures: dict[str, Failure] = {}
    unresolved: set[str] = set()
    meta: dict[str, Any] = {}
    batch_id = None
    for frame, group in data.batches(suite.expectations):
        if not group:
            continue
        with _no_fingerprint():
            part = Validator(
                batch_definition=batch_definition,
                batch_parameters={"dataframe": frame},
                result_format=dict(result_format),
            ).validate_expectation_suite(
                gx.ExpectationSuite(name=suite.name, expectations=[e.configuration for e in group]))
        meta = meta or dict(part.meta)
        batch_id = batch_id or part.batch_id
        for r in part.results:
            key = str(r.expectation_config.id)  # type: ignore[union-attr]
            by_id[key] = r
            if r.exception_info and "raised_exception" not in r.exception_info:
                unresolved.add(key)
            if not r.success:
                failures[key] = failure_from_result(split, r, frame, offending_rows)
        del frame, part
        forget_metrics(batch_definition)
    ids = [str(e.id) for e in suite.expectations]
    order = [k for k in ids if k in unresolved] + [k for k in ids if k not in unresolved]
    results = [by_id[k] for k in order]
    stats = calc_validation_statistics(results)
    markers = meta.get("batch_markers")
    fingerprint = whole_fingerprint(data)
    if isinstance(markers, dict) and fingerprint is not None:
        markers["pandas_data_fingerprint"] = fingerprint
    # the fields ValidationDefinition.run adds
    meta.update(
        validation_id=validation_id,
        checkpoint_id=None,
        run_id=run_id,
        validation_time=run_id.run_time,
        batch_parameters={"dataframe": DATAFRAME_REPLACEMENT_STR},
    )
    vr = ExpectationSuiteValidationResult(
        results=results,
        success=stats.success,
        suite_name=suite.name,
        statistics={
            "evaluated_expectations": stats.evaluated_expectations,
            "successful_expectations": stats.successful_expectations,
            "unsuccessful_expectations": stats.unsuccessful_expectations,
            "success_percent": stats.success_percent,
        },
        meta=meta,
        batch_id=batch_id,
    )
    return vr, [failures[k] for k in order if k in failures]


@contextmanager
def _no_fingerprint() -> Iterator[None]:
    """GX fingerprints no frame in the block (its threshold is read when a batch is made)."""
    threshold = pandas_execution_engine.HASH_THRESHOLD
    pandas_execution_engine.HASH_THRESHOLD = 0
    try:
        yield
    finally:
        pandas_execution_engine.HASH_THRESHOLD = threshold


def whole_fingerprint(data: SplitData) -> str | None:
    """GX's `pandas_data_fingerprint` of the split read whole (execution_engine.hash_pandas_dataframe: the md5
    of `hash_pandas_object(frame, index=True)`), or None where GX gives none: a frame of HASH_THRESHOLD bytes
    or more (`frame.memory_usage()`, counted from the file's column types) or values pandas cannot hash."""
    if data.nbytes() >= pandas_execution_engine.HASH_THRESHOLD:
        return None
    try:
        hashes = row_hashes(data, index=True)
    except TypeError:
        return None
    return hashlib.md5(hashes.data, usedforsecurity=False).hexdigest()


def forget_metrics(batch_definition: Any) -> None:
    """Empty the metric cache of the batch's execution engine. GX keeps every metric it resolves there for the
    datasource's life (ExecutionEngine._metric_cache; for pandas the condition Series of every column-map
    expectation, a full column each), so every batch and split validated before stayed in memory: 5 GB at
    AliExpress' full size. Nothing is reused from it: a later batch or split validates other columns or
    another batch."""
    engine = batch_definition.data_asset.datasource.get_execution_engine()
    cache = getattr(engine, "_metric_cache", None)
    if isinstance(cache, dict):
        cache.clear()
