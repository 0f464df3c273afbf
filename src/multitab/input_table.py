"""A user's table as the estimator (multitab.estimator) takes it: a DataFrame with string column names from a
frame or an array, its feature values checked, and the rows kept aside for early stopping."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


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
