"""MultiTaskEstimator never answers wrongly in silence: every constructor argument is checked against its declared
range when `fit` starts; at predict each column is read as the kind it had at fit (categories by value, numbers
as numbers) or refused naming it, and many unseen categories warn; a column of mixed value types and a y whose
index is not X's are refused."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from multitab import MultiTaskEstimator
from multitab.input_table import UnseenCategoryWarning

TINY = {"model_params": {"d_embedding": 4, "d_hidden": [8]}, "max_epochs": 2, "batch_size": 32}

# Values out of each argument's range (or of a wrong type). Every constructor argument needs an entry: a new
# argument without a declared constraint and a case here fails test_an_argument_out_of_range_is_refused_naming_it.
BAD: dict[str, list[Any]] = {
    "model": ["mlp", 3],
    "hparams": [3, ["hparams/recipe/mmoe.yaml"]],
    "model_params": [[("d_embedding", 4)], "d_embedding=4"],
    "protocol": ["papers", None],
    "max_epochs": [0, -3, 2.5, "10"],
    "lr": [0, -1e-3, float("nan"), float("inf"), "1e-3"],
    "batch_size": [0, -32, 1, 64.0],
    "patience": [0, -1, None],
    "validation_fraction": [0, 1, 1.5, -0.1, None],
    "random_state": [-1, 2**32, 0.5, np.random.RandomState(0), None],
    "task_types": [["binary"], "binary"],
    "device": ["gpu", "cuda:0", None],
    "verbose": ["yes", 2],
}


def _cases() -> list[Any]:
    names = [n for n in inspect.signature(MultiTaskEstimator.__init__).parameters if n != "self"]
    def shown(value: Any) -> str:  # the same id in every pytest-xdist worker (no object address)
        return repr(value) if isinstance(value, int | float | str | list | type(None)) else type(value).__name__

    return [pytest.param(name, value, id=f"{name}={shown(value)}") for name in names for value in BAD.get(name, [...])]


def _table(n: int = 120, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`level`: an integer categorical (5 codes) that decides `click`; `spend` numerical."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"level": rng.integers(1, 6, n), "spend": rng.normal(0, 1, n).round(3)})
    Y = pd.DataFrame({"click": (X["level"] >= 3).astype(np.int64),
                      "amount": 2.0 * X["spend"] + (X["level"] == 5) + rng.normal(0, 0.1, n)})
    return X, Y


@pytest.mark.parametrize(("name", "value"), _cases())
def test_an_argument_out_of_range_is_refused_naming_it(name: str, value: Any) -> None:
    assert name in MultiTaskEstimator._parameter_constraints, f"declare {name}'s constraint (_parameter_constraints)"
    assert value is not ..., f"add values out of {name}'s range to BAD"
    X, Y = _table(40)
    est = MultiTaskEstimator(**{"model": "stl_mlp", **TINY, name: value})
    # scikit-learn's parameter validation; `model` (a registry name or `package.module:Class`) says the registry
    named = rf"^(The '{name}' parameter of MultiTaskEstimator must be .* Got .* instead|{name}=.* is not a registered)"
    with pytest.raises(ValueError, match=named):
        est.fit(X, Y)
    assert not hasattr(est, "model_")  # refused before anything trained


def test_an_integer_category_given_as_text_scores_as_before(one_torch_thread: None) -> None:
    X, Y = _table()
    est = MultiTaskEstimator("stl_mlp", **TINY, random_state=3).fit(X, Y)
    expected = est.predict_proba(X)["click"]
    # the same values as text (a CSV read as strings, a column built apart): categories by value, numbers parsed
    as_text = X.assign(level=X["level"].astype(str), spend=X["spend"].astype(str))
    floats = X.assign(level=X["level"].astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnseenCategoryWarning)
        for other in (as_text, floats, X.astype(str)):
            pd.testing.assert_frame_equal(est.predict_proba(other)["click"], expected)
            assert est.task_scores(other, Y) == est.task_scores(X, Y)
        # labels are compared by value too
        assert est.task_scores(X, Y.assign(click=Y["click"].astype(str))) == est.task_scores(X, Y)


def test_a_column_mostly_unseen_at_fit_warns_naming_it(one_torch_thread: None) -> None:
    X, Y = _table()
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    with pytest.warns(UnseenCategoryWarning, match=r"column 'level': 100% of the 120 rows hold a category not seen"):
        est.predict(X.assign(level=X["level"] + 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnseenCategoryWarning)
        est.predict(X.assign(level=np.where(np.arange(len(X)) == 0, 99, X["level"])))  # one row of 120: no warning


def test_a_value_that_is_no_number_in_a_numerical_column_is_refused_naming_it(one_torch_thread: None) -> None:
    X, Y = _table()
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    bad = X.assign(spend=X["spend"].astype(str).where(np.arange(len(X)) != 7, "n/a"))
    with pytest.raises(ValueError, match=r"column 'spend' was numerical at fit, but row 7 holds 'n/a', not a number"):
        est.predict(bad)
    with pytest.raises(ValueError, match=r"column 'spend' was numerical at fit, but row 7 holds 'n/a'"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y, validation_data=(bad, Y))


def test_a_column_of_mixed_value_types_is_refused_naming_it() -> None:
    X, Y = _table(40)
    mixed = X["level"].astype(object).where(np.arange(40) % 2 == 0, X["level"].astype(str))
    with pytest.raises(ValueError, match=r"X: column 'level' mixes value types: int \(\d\), str \('\d'\)"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X.assign(level=mixed), Y)
    with pytest.raises(ValueError, match=r"y: column 'click' mixes value types"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y.assign(click=Y["click"].astype(object).where(
            np.arange(40) % 2 == 0, "yes")))


def test_a_y_whose_index_is_not_x_s_is_refused(one_torch_thread: None) -> None:
    X, Y = _table()
    shuffled = Y.sample(frac=1.0, random_state=0)  # the same labels, in another order: pairs by position
    with pytest.raises(ValueError, match=r"fit: y's index differs from X's \(row 0: X's label 0, y's \d+\).*"
                                         r"y\.loc\[X\.index\]"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X, shuffled)
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, shuffled.loc[X.index])
    with pytest.raises(ValueError, match=r"score: y's index differs from X's"):
        est.score(X, shuffled)
    with pytest.raises(ValueError, match=r"validation_data: y's index differs from X's"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y, validation_data=(X, shuffled))
    assert np.isfinite(est.score(X, shuffled.loc[X.index]))
