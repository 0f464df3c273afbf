"""Feature-kind and task-type inference (multitab.datasets.infer): the documented rule, deterministic, on real-looking
column names."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from multitab.datasets.infer import MAX_LEVELS, InferenceError, infer_features, task_type


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 200
    return pd.DataFrame({
        "Age (years)": rng.integers(17, 90, n),                     # integers, many values: numerical
        "class of worker": rng.choice(["Private", "State-gov", "Self-emp"], n),   # strings: categorical
        "education-num": rng.integers(1, 17, n),                     # integers, 16 values: categorical
        "wage per hour": rng.normal(20, 5, n),                       # floats with fractions: numerical
        "b-tag": rng.choice([0.0, 1.0, 2.0], n),                     # whole floats, 3 values: categorical
        "Owns home?": rng.random(n) < 0.5,                           # booleans: categorical
        "region": pd.Categorical(rng.choice(["N", "S"], n)),         # category dtype: categorical
        "id": np.arange(n),
        "income >50K": rng.integers(0, 2, n),
        "marital status": rng.choice(["married", "never", "divorced"], n),
        "spend ($)": rng.gamma(2.0, 10.0, n),
    })


def test_features_get_their_kind_by_the_documented_rule() -> None:
    kinds = infer_features(_table(), targets=["income >50K", "marital status", "spend ($)"], drop=["id"])
    assert kinds.categorical == ("class of worker", "education-num", "b-tag", "Owns home?", "region")
    assert kinds.numerical == ("Age (years)", "wage per hour")
    record = json.loads(json.dumps(kinds.record()))  # what meta.json holds
    assert record["categorical"] == list(kinds.categorical) and "at most 20 distinct" in record["rule"]
    assert record["reasons"]["education-num"] == "categorical: whole numbers, 16 distinct (<= 20)"


def test_the_threshold_is_at_most_max_levels_distinct_integers() -> None:
    frame = pd.DataFrame({"at": np.arange(MAX_LEVELS).repeat(2), "above": np.arange(2 * MAX_LEVELS)})
    kinds = infer_features(frame)
    assert (kinds.categorical, kinds.numerical) == (("at",), ("above",))


def test_declared_kinds_win_and_inference_is_deterministic() -> None:
    table = _table()
    kinds = infer_features(table, targets=["income >50K"], categorical=["Age (years)"], numerical=["education-num"],
                           drop=["id", "marital status", "spend ($)"])
    assert "Age (years)" in kinds.categorical and "education-num" in kinds.numerical
    assert kinds.reasons["Age (years)"] == "categorical: declared"
    assert infer_features(table.copy(), targets=["income >50K"], categorical=["Age (years)"],
                          numerical=["education-num"], drop=["id", "marital status", "spend ($)"]) == kinds


def test_missing_values_are_not_counted_as_a_level() -> None:
    frame = pd.DataFrame({"code": [1.0, 2.0, np.nan, 1.0], "x": [0.5, np.nan, 1.5, 2.5]})
    kinds = infer_features(frame)
    assert (kinds.categorical, kinds.numerical) == (("code",), ("x",))


@pytest.mark.parametrize(("values", "expected"), [
    ([0, 1, 1, 0], "binary"), (["yes", "no", "no"], "binary"), ([True, False, True], "binary"),
    ([1.5, 2.5, 1.5], "binary"), ([0, 1, 2, 1], "multiclass"), (["a", "b", "c"], "multiclass"),
    ([0.5, 1.25, 7.0], "regression"), (list(range(200)), "regression"),
])
def test_task_types(values: list[object], expected: str) -> None:
    assert task_type(pd.Series(values, name="t")) == expected


def test_a_column_that_cannot_be_decided_is_named() -> None:
    frame = pd.DataFrame({"when": pd.to_datetime(["2024-01-01", "2024-01-02"]), "y": [0, 1]})
    with pytest.raises(InferenceError, match="column 'when': dtype datetime64"):
        infer_features(frame, targets=["y"])
    with pytest.raises(InferenceError, match="target 'y': 1 distinct"):
        task_type(pd.Series([1, 1], name="y"))
    with pytest.raises(InferenceError, match="column 'nope' is not in the table"):
        infer_features(frame, targets=["nope"])
