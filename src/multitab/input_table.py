"""A user's table as the estimator (multitab.estimator) takes it: a DataFrame with string column names from a
frame or an array, its feature values checked (one value type per column, numbers where fit had numbers), y's
rows checked to be X's, the task columns encoded, and the rows kept aside for early stopping."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from multitab.datasets.infer import task_type
from multitab.datasets.preprocess import match_categories

UNSEEN_WARNING = 0.1  # the share of a column's rows with unseen categories above which predict warns


def as_frame(X: Any, prefix: str) -> pd.DataFrame:
    """`X` as a DataFrame with string column names (an array's columns are `<prefix>0`, `<prefix>1`, ...)."""
    if X is None:
        raise ValueError("this estimator requires y to be passed, but the target y is None (y: the task columns)")
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):  # a scipy sparse matrix or array
        raise TypeError("sparse input is not supported; pass a DataFrame or a dense array (X.toarray())")
    if isinstance(X, pd.Series):
        X = X.to_frame(name=prefix if X.name is None else X.name)
    if not isinstance(X, pd.DataFrame):
        a = np.asarray(X)
        if a.ndim == 1:
            a = a.reshape(-1, 1) if prefix == "y" else a
        if a.ndim != 2:
            raise ValueError(f"expected a 2-d table, got an array of shape {a.shape}. Reshape your data (a column: "
                             "X.reshape(-1, 1), a row: X.reshape(1, -1))")
        if np.iscomplexobj(a):
            raise ValueError("Complex data not supported")
        names = [prefix] if prefix == "y" and a.shape[1] == 1 else [f"{prefix}{i}" for i in range(a.shape[1])]
        X = pd.DataFrame(a, columns=names)
    return X.set_axis([str(c) for c in X.columns], axis=1)


def check_finite(frame: pd.DataFrame) -> None:
    """A missing or infinite feature value is refused (the models take none), naming the column and the row."""
    for name in frame.columns:
        column = frame[name]
        bad = column.isna().to_numpy()
        if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
            bad = bad | ~np.isfinite(column.to_numpy(dtype=np.float64, na_value=np.nan))
        if bad.any():
            raise ValueError(f"Input X contains NaN or infinity: column {name!r} row {int(np.flatnonzero(bad)[0])}; "
                             "fill or drop it")


def validation_rows(y: np.ndarray | None, n: int, fraction: float, seed: int) -> dict[str, np.ndarray]:
    """The training and validation row numbers of `n` rows: `fraction` of them drawn with `seed`, stratified on
    `y` (the first classification task's class indices; None: none) so that its AUC, the early-stopping
    criterion, is defined: in proportion (scikit-learn's stratified split) when each class has two rows or more
    and the validation rows can hold one of each; else one row of each class with two rows or more first, then
    the others."""
    from sklearn.model_selection import train_test_split

    if not 0 < fraction < 1:
        raise ValueError(f"validation_fraction={fraction} must be in (0, 1)")
    n_val = max(1, round(fraction * n))
    if y is None:
        train, val = train_test_split(np.arange(n), test_size=n_val, random_state=seed)
        return {"train": np.sort(train), "val": np.sort(val)}
    counts = np.bincount(y)
    if counts.min() >= 2 and len(counts) <= n_val <= n - len(counts):
        train, val = train_test_split(np.arange(n), test_size=n_val, random_state=seed, stratify=y)
        return {"train": np.sort(train), "val": np.sort(val)}
    order = np.random.default_rng(seed).permutation(n)
    shared = counts[y[order]] >= 2
    n_val = min(max(n_val, int((counts >= 2).sum())), n - 1)
    # each row's rank within its class in the drawn order; a class's only row goes last
    rank = pd.Series(y[order]).groupby(y[order]).cumcount().to_numpy().astype(np.float64)
    rank[~shared] = np.inf
    val = order[np.lexsort((np.arange(n), rank))[:n_val]]
    return {"train": np.setdiff1d(np.arange(n), val), "val": np.sort(val)}


def _shown(value: Any) -> str:
    """A cell as a message quotes it: numpy scalars as plain Python values, cut to 60 characters."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_same_rows(X: Any, y: Any, what: str) -> None:
    """`y`'s rows are `X`'s: where both are pandas objects, their indexes must be equal (the same labels in the
    same order). scikit-learn pairs rows by position; a y sorted or filtered apart from X would train on
    (or score against) the wrong labels without a word, so it is refused, not aligned."""
    if not (isinstance(X, pd.DataFrame | pd.Series) and isinstance(y, pd.DataFrame | pd.Series)):
        return
    if len(X) != len(y) or X.index.equals(y.index):
        return
    at = next((i for i, (a, b) in enumerate(zip(X.index, y.index)) if not a == b), None)
    if at is None:  # the same labels in index types that differ
        return
    raise ValueError(f"{what}: y's index differs from X's (row {at}: X's label {_shown(X.index[at])}, y's "
                     f"{_shown(y.index[at])}); y's rows must be X's, in X's order: pass y.loc[X.index], or both "
                     "with .reset_index(drop=True)")


def check_uniform(frame: pd.DataFrame, what: str) -> None:
    """A column mixing value types (text and numbers, booleans and text: an object column read in chunks, a
    column pieced together) is refused, naming it: its values cannot be compared or ordered as one kind."""
    for name in frame.columns:
        column = frame[name]
        values = column.cat.categories if isinstance(column.dtype, pd.CategoricalDtype) else column
        if not pd.api.types.is_object_dtype(values.dtype):
            continue
        if pd.api.types.infer_dtype(values, skipna=True) in ("mixed", "mixed-integer"):
            kinds: dict[str, Any] = {}
            for v in values.dropna():
                kinds.setdefault(type(v).__name__, v)
            shown = ", ".join(f"{k} ({_shown(v)})" for k, v in list(kinds.items())[:3])
            raise ValueError(f"{what}: column {name!r} mixes value types: {shown}; make it one type "
                             f"(e.g. {what}[{name!r}].astype(str), or pd.to_numeric)")


def as_numbers(frame: pd.DataFrame, numerical: list[str]) -> pd.DataFrame:
    """`frame` with its `numerical` columns (numerical at fit) as numbers: text such as "2.5" (a CSV read as
    text) becomes 2.5; a value that is no number is refused, naming the column, the row and the value."""
    out = {}
    for name in numerical:
        column = frame[name]
        if pd.api.types.is_numeric_dtype(column.dtype):
            continue
        values = pd.to_numeric(column, errors="coerce")
        bad = (values.isna() & column.notna()).to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(f"column {name!r} was numerical at fit, but row {row} holds {_shown(column.iloc[row])}, "
                             "not a number; fix the value or drop the row")
        out[name] = values
    return frame.assign(**out) if out else frame


class UnseenCategoryWarning(UserWarning):
    """Many rows of a categorical column hold categories not seen at fit (`warn_unseen`)."""


def warn_unseen(x_cat: np.ndarray, names: list[str], threshold: float = UNSEEN_WARNING) -> None:
    """A warning per categorical column whose rows hold a category unseen at fit (code 0) in more than
    `threshold` of them: without it, a column whose values changed form or meaning since fit would be scored as
    noise without a word."""
    if len(x_cat) == 0:
        return
    for name, share in zip(names, (x_cat == 0).mean(axis=0)):
        if share > threshold:
            warnings.warn(f"column {name!r}: {share:.0%} of the {len(x_cat)} rows hold a category not seen at fit "
                          "(coded as unseen); check that the column holds the values it held at fit",
                          UnseenCategoryWarning, stacklevel=4)  # the caller of predict


def task_types_and_classes(Y: pd.DataFrame, given: Mapping[str, str] | None
                           ) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """({task: binary | multiclass | regression}, {classification task: its labels, sorted}) of the training
    targets `Y`; `given` types override the inferred ones (multitab.datasets.infer.task_type)."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(Y.columns))
    if unknown:
        raise ValueError(f"task_types names {unknown}, not columns of y ({list(Y.columns)})")
    types = {t: given.get(t) or task_type(Y[t]) for t in Y.columns}
    classes = {t: np.unique(Y[t].dropna().to_numpy()) for t, kind in types.items() if kind != "regression"}
    for t, kind in types.items():
        if kind not in ("binary", "multiclass", "regression"):
            raise ValueError(f"task_types[{t!r}] = {kind!r}: expected binary, multiclass or regression")
        if kind == "binary" and len(classes[t]) != 2:
            raise ValueError(f"task {t!r} is binary but holds {len(classes[t])} distinct labels "
                             f"{classes[t].tolist()[:10]}; call it multiclass in task_types")
    return types, classes


def encode_targets(Y: pd.DataFrame, types: Mapping[str, str], classes: Mapping[str, np.ndarray], where: str
                   ) -> pd.DataFrame:
    """Class indices (classification; labels compared by value, as categories are: "1" is 1) and floats
    (regression) of `Y`'s task columns."""
    out = {}
    for t, kind in types.items():
        if t not in Y.columns:
            raise ValueError(f"{where}: task column {t!r} missing (the tasks: {list(types)})")
        column = Y[t]
        if column.isna().any():
            raise ValueError(f"{where}: task {t!r} row {int(np.flatnonzero(column.isna())[0])}: missing label "
                             "(NaN); drop the row or fill it")
        if kind == "regression":
            values = pd.to_numeric(column, errors="coerce")
            if values.isna().any():
                row = int(np.flatnonzero(values.isna())[0])
                raise ValueError(f"{where}: task {t!r} is a regression task, but row {row} holds "
                                 f"{_shown(column.iloc[row])}, not a number")
            out[t] = values.to_numpy(dtype=np.float64)
            continue
        codes = match_categories(classes[t], column)
        if (codes == 0).any():
            row = int(np.flatnonzero(codes == 0)[0])
            raise ValueError(f"{where}: task {t!r} row {row}: label {_shown(column.iloc[row])} was not in the training "
                             f"labels {classes[t].tolist()}")
        out[t] = codes - 1
    return pd.DataFrame(out, index=Y.index)
