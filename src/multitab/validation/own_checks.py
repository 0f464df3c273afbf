"""The checks outside Great Expectations' engine (expectations.py), evaluated with numpy a column at a time:
rows repeating an earlier row of the split (`duplicates`), val/test rows identical to a train row
(`overlap`), a class of a multiclass task absent from every split (`class_absent`), regression targets
outside robust bounds fitted on train (`target_range`). Each split's row hashes are computed once, and the
train hashes sorted once for the overlap of val and test."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from multitab.config.validation import RawConfig, ValidationConfig
from multitab.datasets.schema import DatasetSchema
from multitab.validation.columns import SplitData, row_hashes
from multitab.validation.expectations import (
    ExpectColumnClassesToOccurInSomeSplit,
    ExpectColumnValuesToBeWithinTrainBounds,
    ExpectTableRowsToBeUnique,
    ExpectTableRowsToNotBeInTrain,
    OwnCheck,
    counted,
)
from multitab.validation.failures import Failure


def _rows_text(split: SplitData, idx: np.ndarray, k: int) -> tuple[tuple[int, object], ...]:
    if not split.columns:
        return tuple((int(i), None) for i in idx[:k])
    first = split.series(split.columns[0]) if len(idx) else None
    return tuple((int(i), first.iloc[int(i)]) for i in idx[:k])  # type: ignore[union-attr]


def _absent_classes(schema: DatasetSchema, splits: Mapping[str, SplitData]) -> dict[str, list[int]]:
    """Multiclass task -> the classes (0..n-1) that occur in no split (integer label columns only: the
    dtype expectation reports others)."""
    out = {}
    for t in schema.tasks:
        if t.type != "multiclass" or not t.n_classes:
            continue
        seen: set[int] = set()
        for split in splits.values():
            labels = split.series(t.name) if t.name in split.columns else None
            if labels is None or not pd.api.types.is_integer_dtype(labels):
                return {}
            seen.update(int(v) for v in np.unique(labels.to_numpy()))
        missing = [c for c in range(t.n_classes) if c not in seen]
        if missing:
            out[t.name] = missing
    return out


def _target_bounds(
    schema: DatasetSchema, train: SplitData | None, raw: RawConfig
) -> dict[str, tuple[float, float]]:
    """Regression task -> robust bounds from train: its 1-99 % quantile range widened `target_spread_factor`
    times its width, within the task's published bounds."""
    bounds = {}
    for t in schema.tasks:
        if t.type != "regression" or train is None or t.name not in train.columns or not train.n_rows:
            continue
        y = pd.to_numeric(train.series(t.name), errors="coerce").to_numpy(np.float64)
        y = y[np.isfinite(y)]
        if not len(y):
            continue
        q01, q99 = np.quantile(y, [0.01, 0.99])
        spread = raw.target_spread_factor * max(q99 - q01, 1e-12)
        lo, hi = q01 - spread, q99 + spread
        lo = max(lo, t.low) if t.low is not None else lo
        hi = min(hi, t.high) if t.high is not None else hi
        bounds[t.name] = (float(lo), float(hi))
    return bounds


def _rows_check(
    expectation: ExpectTableRowsToBeUnique | ExpectTableRowsToNotBeInTrain,
    name: str,
    split: SplitData,
    bad: np.ndarray,
    what: str,
    why: str,
    k: int,
) -> OwnCheck:
    """A check of whole rows, `bad` the offending row numbers: failed beyond the tolerated share of rows,
    saying "<n> of <rows> rows <what> (<share>): <why>"."""
    n, tolerated = split.n_rows, expectation.max_fraction
    failure = None
    if n and len(bad) > tolerated * n:
        share = f"{100 * len(bad) / n:.3g}%, tolerated {100 * tolerated:g}%"
        failure = Failure(
            name, None, (expectation.meta or {})["check"], expectation.title,
            f"{len(bad)} of {n} rows {what} ({share}): {why}", _rows_text(split, bad, k),
        )  # fmt: skip
    return OwnCheck(expectation, counted(n, bad, k), failure)


def _class_absent_check(schema: DatasetSchema, task: str, missing: list[int]) -> OwnCheck:
    """A multiclass task with classes in no split (`_absent_classes`): a failed check of train."""
    title = ExpectColumnClassesToOccurInSomeSplit.title
    n_classes = schema.task(task).n_classes or 0
    expectation = ExpectColumnClassesToOccurInSomeSplit(
        column=task,
        n_classes=n_classes,
        meta={"check": "class_absent", "column": task},
        description=f"{title}: each of the {n_classes} classes of '{task}' occurs in train, val or test",
    )
    failure = Failure(
        "train", task, "class_absent", title,
        f"class(es) {missing} of '{task}' occur in no split (train, val or test): the model cannot learn "
        "them and their one-vs-rest AUC is undefined; use a larger sample",
    )  # fmt: skip
    return OwnCheck(expectation, {"observed_value": {"absent_classes": missing}}, failure)


def _target_range_check(
    schema: DatasetSchema, name: str, split: SplitData, task: str, bounds: tuple[float, float],
    raw: RawConfig, k: int,
) -> OwnCheck:  # fmt: skip
    """Every finite value of regression task `task` within `bounds` (`_target_bounds`)."""
    lo, hi = bounds
    title = ExpectColumnValuesToBeWithinTrainBounds.title
    values = split.series(task)
    y = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.isfinite(y) & ((y < lo) | (y > hi)))
    failure = None
    if len(bad):
        published = any(t.name == task and (t.low is not None or t.high is not None) for t in schema.tasks)
        failure = Failure(
            name, task, "target_range", title,
            f"{len(bad)} of {split.n_rows} values outside [{lo:.4g}, {hi:.4g}] (train's 1-99 % quantile range "
            f"widened {raw.target_spread_factor:g} times its width"
            + (", and the published bounds" if published else "")
            + "): wrong units or a scaled column?",
            tuple((int(i), values.iloc[int(i)]) for i in bad[:k]),
        )  # fmt: skip
    expectation = ExpectColumnValuesToBeWithinTrainBounds(
        column=task,
        min_value=lo,
        max_value=hi,
        meta={"check": "target_range", "column": task},
        description=f"{title}: every finite value in [{lo:.4g}, {hi:.4g}]",
    )
    return OwnCheck(expectation, counted(split.n_rows, bad, k, y[bad]), failure)


def _in_sorted(values: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """`np.isin(values, sorted_unique)` for a sorted array of unique values, without sorting it again."""
    if not len(sorted_unique):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_unique, values), len(sorted_unique) - 1)
    return sorted_unique[pos] == values


def extra_checks(
    schema: DatasetSchema, splits: Mapping[str, SplitData], cfg: ValidationConfig
) -> dict[str, list[OwnCheck]]:
    """Checks outside Great Expectations' engine (numpy, one pass each; expectations.py): duplicate rows
    within a split, val/test rows identical to a train row (leakage), every class of a multiclass task in
    some split, regression targets within robust bounds of train. Split -> its checks, passed or failed."""
    k = cfg.report.offending_rows
    raw = cfg.raw
    train_h = row_hashes(splits["train"]) if "train" in splits else None
    train_set = np.unique(train_h) if train_h is not None else np.zeros(0, np.uint64)
    bounds = _target_bounds(schema, splits.get("train"), raw)
    # Survey microdata repeats people by nature (schema.records_repeat): judge repeats against its own rate.
    dup_max, overlap_max = (
        (raw.repeated_records_max_fraction,) * 2
        if schema.records_repeat
        else (raw.duplicates_max_fraction, raw.overlap_max_fraction)
    )
    nature = (
        f"{schema.name}'s records repeat by nature (survey microdata), but not this often"
        if schema.records_repeat
        else None
    )
    absent = _absent_classes(schema, splits)
    out: dict[str, list[OwnCheck]] = {}
    for name, split in splits.items():
        h = train_h if name == "train" and train_h is not None else row_hashes(split)
        duplicates = ExpectTableRowsToBeUnique(
            max_fraction=dup_max,
            meta={"check": "duplicates", "column": None},
            description=f"{ExpectTableRowsToBeUnique.title}: at most {100 * dup_max:g}% of rows repeat an "
            "earlier row of the split",
        )
        checks = [
            _rows_check(
                duplicates, name, split, np.flatnonzero(pd.Series(h).duplicated().to_numpy()),
                "repeat an earlier row of the split",
                (nature or "the file holds copied rows") + " (or is it concatenated with itself?)",
                k,
            )
        ]  # fmt: skip
        if name != "train":
            overlap = ExpectTableRowsToNotBeInTrain(
                max_fraction=overlap_max,
                meta={"check": "overlap", "column": None},
                description=f"{ExpectTableRowsToNotBeInTrain.title}: at most {100 * overlap_max:g}% of rows "
                "identical to a train row",
            )
            checks.append(
                _rows_check(
                    overlap, name, split, np.flatnonzero(_in_sorted(h, train_set)),
                    "are identical to a train row",
                    "they leak between the splits; " + (f"{nature}; " if nature else "")
                    + "remove duplicate rows from the source file",
                    k,
                )
            )  # fmt: skip
        del h
        if name == "train":
            train_h = None
        if name == "train":
            checks += [_class_absent_check(schema, task, missing) for task, missing in absent.items()]
        checks += [
            _target_range_check(schema, name, split, task, b, raw, k)
            for task, b in bounds.items()
            if task in split.columns
        ]
        out[name] = checks
    return out
