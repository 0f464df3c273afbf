"""What a table's columns are, decided from the values alone (deterministic: the same frame, the same answer).

    kinds = infer_features(frame, targets=["income", "marital status"])
    kinds.categorical, kinds.numerical      # column names, in the frame's order
    kinds.record()                          # what meta.json writes: the lists, the rule, why each column

A feature is
- categorical when its dtype is boolean, string / object or pandas `category`, or when it holds integers
  (an integer dtype, or floats that are all whole numbers) with at most `MAX_LEVELS` (20) distinct values
  (codes such as education levels, weekdays, b-tags);
- numerical otherwise: floats with a fraction, and integers with more than `MAX_LEVELS` distinct values (age,
  counts, amounts).
Missing values are not counted as a value. A column listed as categorical / numerical keeps that kind; a
column in `drop` is left out; a target is never a feature.

A task is `binary` when its column holds exactly two distinct values (any dtype), `multiclass` when it holds
3 or more values that are strings, booleans, categories or integers (at most `MAX_CLASSES`, 100),
`regression` when it holds numbers otherwise (floats with a fraction, or integers with more distinct values).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

MAX_LEVELS = 20  # an integer feature with at most this many distinct values is categorical
MAX_CLASSES = 100  # an integer target with at most this many distinct values (3 or more) is multiclass
RULE = (f"categorical: boolean, string or category dtype, or integers (whole numbers) with at most {MAX_LEVELS} "
        f"distinct values; numerical: other numbers")

TaskType = Literal["binary", "multiclass", "regression"]


class InferenceError(ValueError):
    """A column whose kind cannot be decided (a date, an empty column, a constant target); the message names it."""


@dataclass(frozen=True)
class FeatureKinds:
    """The features of a table by kind (names in the frame's column order) and why each got its kind."""

    categorical: tuple[str, ...]
    numerical: tuple[str, ...]
    reasons: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What meta.json (and the validation page) shows: the kinds, the rule and each column's reason."""
        return {"categorical": list(self.categorical), "numerical": list(self.numerical), "rule": RULE,
                "reasons": dict(self.reasons)}


def _is_text(s: pd.Series) -> bool:
    return (isinstance(s.dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(s.dtype)
            or pd.api.types.is_object_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype))


def _whole(values: pd.Series) -> bool:
    """Whether the non-missing values of a numeric column are all whole numbers."""
    if pd.api.types.is_integer_dtype(values.dtype):
        return True
    v = values.to_numpy(dtype=np.float64, na_value=np.nan)
    v = v[~np.isnan(v)]
    return bool(np.all(np.isfinite(v)) and np.all(v == np.round(v)))


def feature_kind(column: pd.Series) -> tuple[Literal["categorical", "numerical"], str]:
    """(kind, why) of one feature column (module docstring)."""
    name = column.name
    if _is_text(column):
        return "categorical", f"dtype {column.dtype}"
    if not pd.api.types.is_numeric_dtype(column.dtype):
        raise InferenceError(f"column {name!r}: dtype {column.dtype} is neither a number nor a category; convert it "
                             "(e.g. a date to a number) or drop it")
    values = column.dropna()
    if values.empty:
        raise InferenceError(f"column {name!r}: every value is missing; drop it")
    n = int(values.nunique())
    if _whole(values) and n <= MAX_LEVELS:
        return "categorical", f"whole numbers, {n} distinct (<= {MAX_LEVELS})"
    if _whole(values):
        return "numerical", f"whole numbers, {n} distinct (> {MAX_LEVELS})"
    return "numerical", f"dtype {column.dtype} with fractions"


def infer_features(frame: pd.DataFrame, *, targets: Iterable[str] = (), categorical: Iterable[str] = (),
                   numerical: Iterable[str] = (), drop: Iterable[str] = ()) -> FeatureKinds:
    """The kind of every column of `frame` but the `targets` and those in `drop`; the columns listed in
    `categorical` / `numerical` keep that kind. Column names are used as they are (spaces, capitals, punctuation)."""
    targets, drop = list(targets), list(drop)
    declared = {**{c: "numerical" for c in numerical}, **{c: "categorical" for c in categorical}}
    for name in [*targets, *drop, *declared]:
        if name not in frame.columns:
            raise InferenceError(f"column {name!r} is not in the table (its columns: {list(frame.columns)})")
    kinds: dict[str, list[str]] = {"categorical": [], "numerical": []}
    reasons: dict[str, str] = {}
    for name in frame.columns:
        if name in targets or name in drop:
            continue
        if name in declared:
            kind, why = declared[name], "declared"
        else:
            kind, why = feature_kind(frame[name])
        kinds[kind].append(name)
        reasons[name] = f"{kind}: {why}"
    return FeatureKinds(tuple(kinds["categorical"]), tuple(kinds["numerical"]), reasons)


def task_type(column: pd.Series) -> TaskType:
    """The type of a target column (module docstring)."""
    values = column.dropna()
    n = int(values.nunique())
    if n < 2:
        raise InferenceError(f"target {column.name!r}: {n} distinct value(s); a task needs at least two")
    if n == 2:
        return "binary"
    if _is_text(column):
        return "multiclass"
    if not pd.api.types.is_numeric_dtype(column.dtype):
        raise InferenceError(f"target {column.name!r}: dtype {column.dtype} is neither a number nor a label")
    if pd.api.types.is_integer_dtype(column.dtype) and n <= MAX_CLASSES:
        return "multiclass"
    return "regression"
