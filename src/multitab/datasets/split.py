"""Raw files -> canonical frames -> the paper's train / val / test splits.

Canonical frame: the schema's input features in schema order (raw values; categorical int64, numerical
float32), then one column per task named by the task (binary int64 0/1, multiclass int64 0..n-1, regression
float32). Splits follow the paper's Implementation Details:
- official_test (AliExpress): the source's train/test files; validation = val_fraction of train, stratified on
  the combination of the labels (a declared dataset with a val file of its own: that file);
- shuffle (ACS Income): a seeded permutation cut 70 / 15 / 15;
- ordered (Higgs, as in prior work): the first val_fraction rows are validation, the last test_fraction test;
- stratified (the authors' notebook's Higgs split, protocol authors_code): random, stratified on the
  classification labels, train vs val + test and then val vs test (scikit-learn's train_test_split).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from multitab.config.data import SplitConfig
from multitab.datasets.schema import DatasetSchema

SPLITS = ("train", "val", "test")


class SplitError(ValueError):
    """Raw data that cannot be made canonical or split as configured."""


def canonical_sources(schema: DatasetSchema) -> dict[str, str]:
    """Canonical column -> the raw column it is made from, in canonical order."""
    return {**{f.name: f.name for f in schema.features}, **{t.name: t.column for t in schema.tasks}}


def may_reject(schema: DatasetSchema, name: str) -> bool:
    """Whether `canonical_column` can raise for canonical column `name` (level-coded features and coded
    labels check their values; every other column is only cast)."""
    if name in schema.task_names:
        return schema.task(name).codes is not None
    return next(f for f in schema.features if f.name == name).levels is not None


def canonical_column(
    schema: DatasetSchema, name: str, col: np.ndarray, origin: str, first_row: int = 0
) -> np.ndarray:
    """Raw column `col` as canonical column `name` (a feature or a task). `origin` names the file; `col` holds
    its rows from `first_row` on."""
    for f in schema.features:
        if f.name != name:
            continue
        if f.kind == "numerical":
            return col.astype(np.float32, copy=False)
        if f.levels is not None:
            # acquire@D already rejected missing and unknown levels with the line of the user's file.
            idx, off = f.level_code(col)
            if off.any():
                row = int(np.flatnonzero(off)[0])
                raise SplitError(
                    f"{origin}: column {f.name!r}, row {first_row + row + 1}: value {col[row].item()!r} is none of "
                    f"the column's levels {f.levels}; re-run acquire@{schema.name} (it checks the levels of the "
                    "source file)"
                )
            return idx
        return col.astype(np.int64, copy=False)
    t = schema.task(name)
    if t.type == "regression":
        return col.astype(np.float32, copy=False)
    if t.threshold is not None:
        return (col > t.threshold).astype(np.int64)
    if t.codes is not None:
        codes = np.asarray(t.codes)
        pos = np.searchsorted(codes, col)
        pos_c = np.minimum(pos, len(codes) - 1)
        bad = codes[pos_c] != col
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise SplitError(
                f"{origin}: column {t.column!r} row {first_row + row}: value {col[row].item()!r} is not one of the "
                f"{t.name} classes {list(t.codes)}"
            )
        return pos_c.astype(np.int64)
    return col.astype(np.int64, copy=False)


def check_raw_columns(schema: DatasetSchema, columns: Sequence[str], origin: str) -> None:
    missing = [c.name for c in schema.raw_columns if c.name not in columns]
    if missing:
        raise SplitError(f"{origin}: missing column(s) {missing}; expected the {schema.name} raw schema")


def canonicalize(schema: DatasetSchema, raw: pd.DataFrame, origin: str) -> pd.DataFrame:
    """Raw columns -> canonical frame. `origin` names the file in error messages."""
    check_raw_columns(schema, list(raw.columns), origin)
    return pd.DataFrame(
        {name: canonical_column(schema, name, raw[src].to_numpy(), origin)
         for name, src in canonical_sources(schema).items()}
    )


def _cut(n: int, fraction: float, what: str) -> int:
    k = int(round(n * fraction))
    if not 0 < k < n:
        raise SplitError(f"{what}={fraction} leaves an empty split for {n} rows; raise the row count")
    return k


def split_sizes(n: int, cfg: SplitConfig) -> tuple[int, int, int]:
    """(train, val, test) rows of a one-file dataset of `n` rows split by fractions (methods shuffle,
    ordered, stratified; official_test keeps the release's own test file)."""
    n_val = _cut(n, cfg.val_fraction, "val_fraction")
    n_test = _cut(n, cfg.test_fraction, "test_fraction")
    if n_val + n_test >= n:
        raise SplitError("val + test fractions leave no training rows")
    return n - n_val - n_test, n_val, n_test


def split_rows(
    schema: DatasetSchema, labels: Mapping[str, pd.DataFrame], cfg: SplitConfig
) -> dict[str, tuple[str, np.ndarray]]:
    """Which rows of which raw file each split takes, in order, as `cfg` says: split -> (raw file, row
    numbers). `labels`: raw file -> its canonical task columns (a frame of the file's length)."""
    rng = np.random.default_rng(cfg.seed)
    if cfg.method == "official_test" and "val" in labels:
        # a validation file of its own (a declared dataset's val.*): each split is its file whole
        if set(labels) != set(SPLITS):
            raise SplitError(f"{schema.name}: official_test with a val file needs raw files train, val and test, "
                             f"got {sorted(labels)}")
        return {k: (k, np.arange(len(labels[k]))) for k in SPLITS}
    if cfg.method == "official_test":
        if set(labels) != {"train", "test"}:
            raise SplitError(f"{schema.name}: official_test needs raw files train and test, got {sorted(labels)}")
        train = labels["train"]
        # Stratify on the label combination (mixed-radix code over the classification tasks).
        strata = np.zeros(len(train), dtype=np.int64)
        for t in schema.tasks:
            if t.type != "regression":
                strata = strata * (t.n_classes or 2) + train[t.name].to_numpy()
        perm = rng.permutation(len(train))
        val_mask = np.zeros(len(train), dtype=bool)
        s_perm = strata[perm]
        del strata
        for s in np.unique(s_perm):
            members = perm[s_perm == s]
            val_mask[members[: int(round(len(members) * cfg.val_fraction))]] = True
        del perm, s_perm
        if not val_mask.any() or val_mask.all():
            raise SplitError(f"{schema.name}: val_fraction={cfg.val_fraction} leaves an empty split")
        return {
            "train": ("train", np.flatnonzero(~val_mask)),
            "val": ("train", np.flatnonzero(val_mask)),
            "test": ("test", np.arange(len(labels["test"]))),
        }
    if set(labels) != {"data"}:
        raise SplitError(f"{schema.name}: method {cfg.method} needs one raw file 'data', got {sorted(labels)}")
    data = labels["data"]
    n = len(data)
    try:
        _, n_val, n_test = split_sizes(n, cfg)
    except SplitError as e:
        raise SplitError(f"{schema.name}: {e}") from None
    if cfg.method == "stratified":
        return {k: ("data", idx) for k, idx in _stratified(schema, data, n_val, n_test, cfg.seed).items()}
    if cfg.method == "ordered":
        return {
            "train": ("data", np.arange(n_val, n - n_test)),
            "val": ("data", np.arange(n_val)),
            "test": ("data", np.arange(n - n_test, n)),
        }
    perm = rng.permutation(n)
    return {
        "train": ("data", perm[n_val + n_test :]),
        "val": ("data", perm[:n_val]),
        "test": ("data", perm[n_val : n_val + n_test]),
    }


def split_frames(
    schema: DatasetSchema, frames: dict[str, pd.DataFrame], cfg: SplitConfig
) -> dict[str, pd.DataFrame]:
    """Split canonical frames (keyed by raw file) into train / val / test as `cfg` says."""
    rows = split_rows(schema, frames, cfg)
    return {k: frames[key].take(idx).reset_index(drop=True) for k, (key, idx) in rows.items()}


def _stratified(
    schema: DatasetSchema, data: pd.DataFrame, n_val: int, n_test: int, seed: int
) -> dict[str, np.ndarray]:
    """Row numbers of a random train / val / test split stratified on the combination of the classification
    labels."""
    from sklearn.model_selection import train_test_split

    labels = [t.name for t in schema.tasks if t.type != "regression"]
    if not labels:
        raise SplitError(f"{schema.name}: method stratified needs a classification task to stratify on")
    strata = data[labels].astype(str).agg("_".join, axis=1) if len(labels) > 1 else data[labels[0]]
    y = strata.to_numpy()
    first = stratified_shuffle_split(y, n_val + n_test, seed)
    second = stratified_shuffle_split(y[first[1]], n_test, seed) if first is not None else None
    if first is None or second is None:  # a class too rare to appear in every part: scikit-learn's message
        idx = np.arange(len(data))
        try:
            _, rest = train_test_split(idx, test_size=n_val + n_test, stratify=strata, random_state=seed)
            train_test_split(rest, test_size=n_test, stratify=strata.iloc[rest], random_state=seed)
        except ValueError as e:
            raise SplitError(f"{schema.name}: stratified split impossible: {e}") from None
        raise AssertionError("scikit-learn split what stratified_shuffle_split could not")  # pragma: no cover
    train_idx, rest = first
    return {"train": train_idx, "val": rest[second[0]], "test": rest[second[1]]}


def stratified_shuffle_split(y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """scikit-learn's `train_test_split(np.arange(len(y)), test_size=n_test, stratify=y, random_state=seed)`
    (StratifiedShuffleSplit's draws, in its order), with each class's rows kept in arrays: scikit-learn extends
    a list with every row number (a numpy scalar and a pointer, ~40 bytes a row: 0.4 GB at Higgs' 11 M rows).
    None where scikit-learn refuses (a class with one row, or more classes than a part has rows)."""
    from sklearn.utils import check_random_state, extmath

    n_train = len(y) - n_test
    classes = np.unique(y)
    y_indices = np.searchsorted(classes, y)  # np.unique's inverse
    class_counts = np.bincount(y_indices, minlength=len(classes))
    n_classes = len(class_counts)
    if not n_classes or class_counts.min() < 2 or n_train < n_classes or n_test < n_classes:
        return None
    # the rows of each class in order (a stable argsort of the class codes, cut by class), a class at a time
    class_indices = [np.flatnonzero(y_indices == i) for i in range(n_classes)]
    del y_indices
    rng = check_random_state(seed)
    # scikit-learn's own per-class counts (a private helper: tests/test_data_columns.py compares the rows)
    n_i = extmath._approximate_mode(class_counts, n_train, rng)
    t_i = extmath._approximate_mode(class_counts - n_i, n_test, rng)
    train, test = [], []
    for i in range(n_classes):
        rows = class_indices[i].take(rng.permutation(class_counts[i]), mode="clip")
        train.append(rows[: n_i[i]])
        test.append(rows[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
