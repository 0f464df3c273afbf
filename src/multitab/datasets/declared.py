"""A dataset declared in params.yaml only (`datasets.<name>` with `tasks:`): its schema, built from the declaration
and the values of the user's files, so that every later stage sees one kind of `DatasetSchema`.

acquire@D reads the files (`local.path`: a file, or a folder with data.* or train.* and test.*, and val.* where
validation is a file of its own: .csv, .csv.gz or .parquet) with the paper's datasets' reader, so that a bad file
fails as it does there (multitab.datasets.sources.table: a CSV's delimiter is `,`, `;` or tab, whichever its header
holds most of; a column name given twice is refused), checks the declaration against them (every problem names the
params key and the column), decides the kind of each undeclared feature (multitab.datasets.infer), and writes
the raw Parquet files with every categorical value and class label as a code (levels sorted, as recorded) and
`schema.json`, the record of what was declared and decided.
split@D copies the record beside the splits; validate_raw@D and preprocess@D read it there, and meta.json carries
it (`declared`).

A numerical feature's missing cells stay missing in the raw and split files (NaN; `missing` and `imputed` in its
record): preprocess@D fills them with the training split's median (`features.missing: median`, the default), or
acquire@D refuses them (`refuse`).

Codes: a categorical feature's levels are its distinct values sorted (numbers by value, text alphabetically); a
missing value is one more level, last (recorded as null). A binary task's negative class is the first of its two
sorted values (no < yes, 0 < 1, False < True); a multiclass task's classes are its sorted values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.config.data import DatasetConfig, FeaturesConfig
from multitab.datasets.columnar import to_parquet
from multitab.datasets.infer import MAX_CLASSES, InferenceError, infer_features
from multitab.datasets.schema import SCHEMAS, DatasetSchema, Feature, RawColumn, Task, get_schema
from multitab.datasets.sources.table import read_header, read_table
from multitab.files.io import atomic_dir, read_json, sha256_file, write_json

SCHEMA_FILE = "schema.json"
SUFFIXES = (".csv", ".csv.gz", ".parquet")


class DeclarationError(ValueError):
    """A declaration that does not fit the files; the message names the params key and the column."""


def _find(folder: Path, stem: str) -> Path | None:
    found = [folder / f"{stem}{s}" for s in SUFFIXES if (folder / f"{stem}{s}").is_file()]
    if len(found) > 1:
        raise DeclarationError(f"{folder}: both {found[0].name} and {found[1].name}; keep one")
    return found[0] if found else None


def locate(name: str, cfg: DatasetConfig, root: Path = Path(".")) -> dict[str, Path]:
    """The declared dataset's files by raw-file key: `data` (one table), or `train` and `test`, with `val` where the
    folder holds a validation file (official_test: validation is val_fraction of train, or that file whole)."""
    key = f"datasets.{name}.local.path"
    if cfg.local.path is None:
        raise DeclarationError(f"{key}: not set; point it at your file, or a folder with data.csv or train.csv "
                               "and test.csv")
    path = root / cfg.local.path
    if path.is_file():
        if not path.name.lower().endswith(SUFFIXES):
            raise DeclarationError(f"{key}: {path}: read are {list(SUFFIXES)} files")
        files = {"data": path}
    elif path.is_dir():
        data, train, val, test = (_find(path, s) for s in ("data", "train", "val", "test"))
        if data is not None and (train or val or test) is not None:
            raise DeclarationError(f"{key}: {path} holds {data.name} and train/val/test files; keep one layout")
        lone = val or test
        if train is None and lone is not None:
            raise DeclarationError(f"{key}: {path} holds {lone.name} but no train.* beside it")
        if val is not None and test is None:
            raise DeclarationError(f"{key}: {path} holds {val.name} but no test.*; a validation file of your own "
                                   "comes with a test file (or append its rows to the train file: "
                                   "split.val_fraction takes validation rows)")
        if data is None and train is None:
            raise DeclarationError(f"{key}: {path} holds no data.* or train.* ({' '.join(SUFFIXES)})")
        found = {"data": data or train} if test is None else {"train": train, "val": val, "test": test}
        files = {k: p for k, p in found.items() if p is not None}
    else:
        raise DeclarationError(f"{key}: {path}: no such file or folder (relative to the repository root)")
    needs = "official_test" if "test" in files else None
    method = cfg.split.method
    if (needs is None) == (method == "official_test"):
        have = "a test file" if needs else "one table"
        want = "official_test" if needs else "shuffle (or ordered, stratified)"
        raise DeclarationError(f"datasets.{name}.split.method: {method} does not fit {have} at {path}; use {want}")
    if "val" in files and cfg.split.val_fraction != 0:
        raise DeclarationError(f"datasets.{name}.split.val_fraction: {cfg.split.val_fraction:g}, but {files['val']} "
                               "is the validation split; set it to 0 (or remove the file to cut validation rows "
                               "from train)")
    return files


def n_features(name: str, cfg: DatasetConfig, root: Path = Path(".")) -> int:
    """The number of features (every column but the tasks and `drop`): what its runs' recipes are resolved for."""
    files = locate(name, cfg, root)
    columns = read_header(next(iter(files.values())))
    drop = (cfg.features or FeaturesConfig()).drop
    return sum(c not in (cfg.tasks or {}) and c not in drop for c in columns)


def _first_text(s: pd.Series) -> tuple[int, Any] | None:
    """(row, value) of the first value that is not a number, or None."""
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        return None
    numbers = pd.to_numeric(s, errors="coerce")
    bad = numbers.isna() & s.notna()
    if not bad.any():
        return None
    row = int(np.flatnonzero(bad.to_numpy())[0])
    return row, s.iloc[row]


def _levels(values: pd.Series) -> list[Any]:
    """The sorted distinct non-missing values (numbers by value, anything else as text)."""
    distinct = values.dropna().unique().tolist()
    if all(isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) for v in distinct):
        return sorted(distinct)
    return sorted(distinct, key=str)


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _codes(values: pd.Series, levels: list[Any]) -> np.ndarray:
    index = {v: i for i, v in enumerate(levels)}
    return np.array([len(levels) if pd.isna(v) else index[v] for v in values], dtype=np.int64)


def _check_task(name: str, column: str, kind: str, values: pd.Series, where: str) -> list[Any]:
    """The class labels of a classification task (sorted), or [] for regression; raise naming the key."""
    key = f"datasets.{name}.tasks.{column}"
    if values.isna().any():
        row = int(np.flatnonzero(values.isna().to_numpy())[0])
        raise DeclarationError(f"{key}: column {column!r} has no value at row {row + 1} of {where}; every row needs "
                               "a label (drop those rows)")
    if kind == "regression":
        text = _first_text(values)
        if text is not None or pd.api.types.is_bool_dtype(values.dtype):
            shown = f"text ({text[1]!r} at row {text[0] + 1} of {where})" if text else "true/false values"
            raise DeclarationError(f"{key}: regression, but column {column!r} holds {shown}; a regression target is "
                                   "a number: fix the values or declare it binary / multiclass")
        return []
    levels = _levels(values)
    if kind == "binary" and len(levels) != 2:
        raise DeclarationError(f"{key}: binary, but column {column!r} holds {len(levels)} distinct value(s) "
                               f"{[_plain(v) for v in levels[:10]]}; a binary task holds exactly two"
                               + ("; declare it multiclass" if len(levels) > 2 else ""))
    if kind == "multiclass":
        numeric = _first_text(values) is None and not pd.api.types.is_bool_dtype(values.dtype)
        if numeric and not np.all(np.mod(values.to_numpy(dtype=np.float64), 1) == 0):
            raise DeclarationError(f"{key}: multiclass, but column {column!r} holds numbers with fractions; "
                                   "declare it regression")
        if not 2 <= len(levels) <= MAX_CLASSES:
            raise DeclarationError(f"{key}: multiclass, but column {column!r} holds {len(levels)} distinct values; "
                                   f"a multiclass task holds 2 to {MAX_CLASSES}")
    return levels


def declare(name: str, cfg: DatasetConfig, frames: Mapping[str, pd.DataFrame], where: Mapping[str, str]
            ) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """The record of a declared dataset (schema.json) and its raw frames in codes, checked against the declaration."""
    tasks = dict(cfg.tasks or {})
    feats = cfg.features or FeaturesConfig()
    first = next(iter(frames))
    columns = list(frames[first].columns)
    for key, frame in frames.items():
        if list(frame.columns) != columns:
            raise DeclarationError(f"datasets.{name}.local.path: {where[key]} has the columns {list(frame.columns)}, "
                                   f"{where[first]} {columns}; the files need the same columns")
    listed = [("tasks", c) for c in tasks] + [(f"features.{k}", c) for k in ("categorical", "numerical", "drop")
                                               for c in getattr(feats, k)]
    for key, column in listed:
        if column not in columns:
            raise DeclarationError(f"datasets.{name}.{key}: column {column!r} is not in {where[first]} "
                                   f"(its columns: {columns})")
    table = pd.concat(list(frames.values()), ignore_index=True) if len(frames) > 1 else frames[first]
    shown = " + ".join(where.values())
    labels = {c: _check_task(name, c, kind, table[c], shown) for c, kind in tasks.items()}
    for column in feats.numerical:
        text = _first_text(table[column])
        if text is not None:
            raise DeclarationError(f"datasets.{name}.features.numerical: column {column!r} holds text ({text[1]!r} "
                                   f"at row {text[0] + 1} of {shown}); declare it categorical or fix the values")
    try:
        kinds = infer_features(table, targets=tasks, categorical=feats.categorical, numerical=feats.numerical,
                               drop=feats.drop)
    except InferenceError as e:
        raise DeclarationError(f"datasets.{name}.features: {e}") from None
    missing = {c: int(table[c].isna().sum()) for c in kinds.numerical if table[c].isna().any()}
    if missing and feats.missing == "refuse":
        column = next(iter(missing))
        row = int(np.flatnonzero(table[column].isna().to_numpy())[0])
        raise DeclarationError(f"datasets.{name}.features.missing: refuse, but numerical column {column!r} has no "
                               f"value at row {row + 1} of {shown}; fill it, drop the rows, or set missing: median")
    levels: dict[str, list[Any]] = {}
    for column in kinds.categorical:
        levels[column] = [_plain(v) for v in _levels(table[column])] + ([None] if table[column].isna().any() else [])
    record: dict[str, Any] = {
        "dataset": name,
        "raw_files": list(frames),
        "features": [{"name": c, "kind": "categorical" if c in levels else "numerical",
                      **({"cardinality": len(levels[c])} if c in levels else {}),
                      **({"missing": missing[c], "imputed": feats.missing} if c in missing else {})}
                     for c in columns if c in kinds.categorical or c in kinds.numerical],
        "tasks": [{"name": c, "type": kind, **({"classes": [_plain(v) for v in labels[c]]} if labels[c] else {})}
                  for c, kind in tasks.items()],
        "drop": list(feats.drop),
        "levels": levels,
        "inference": kinds.record(),
    }
    coded: dict[str, pd.DataFrame] = {}
    for key, frame in frames.items():
        out: dict[str, np.ndarray] = {}
        for f in record["features"]:
            c = f["name"]
            if c in levels:
                out[c] = _codes(frame[c], [v for v in levels[c] if v is not None])
            else:
                out[c] = pd.to_numeric(frame[c]).to_numpy(dtype=np.float64)
        for c in tasks:
            out[c] = (_codes(frame[c], labels[c]) if labels[c]
                      else pd.to_numeric(frame[c]).to_numpy(dtype=np.float64))
        coded[key] = pd.DataFrame(out)
    return record, coded


def split_record(record: Mapping[str, Any], constant: Mapping[str, Any]) -> dict[str, Any]:
    """The record split@D writes beside the splits: acquire@D's without the features left out for holding one value
    in the training split, which its `constant` lists (column -> that value; null: none) (features.constant: drop),
    and `left_out`: every column of the file that is neither feature nor task -> why (the report lists them)."""
    out = dict(record)
    out["features"] = [f for f in record["features"] if f["name"] not in constant]
    out["levels"] = {c: v for c, v in record["levels"].items() if c not in constant}
    out["constant"] = dict(constant)
    out["left_out"] = {**{c: "features.drop" for c in record["drop"]},
                       **{c: "one value in every training row (features.constant: drop)" for c in constant}}
    return out


def schema_from_record(record: Mapping[str, Any]) -> DatasetSchema:
    """The DatasetSchema of a declared dataset's record (schema.json)."""
    features = tuple(Feature(f["name"], f["kind"], cardinality=f.get("cardinality"), imputed="imputed" in f)
                     for f in record["features"])
    tasks = []
    for t in record["tasks"]:
        n = len(t.get("classes", []))
        tasks.append(Task(t["name"], t["type"], column=t["name"], n_classes=n if t["type"] == "multiclass" else None,
                          codes=tuple(range(n)) if t["type"] == "multiclass" else None))
    raw = (*(RawColumn(f.name, "int" if f.kind == "categorical" else "float", "feature") for f in features),
           *(RawColumn(t.name, "float" if t.type == "regression" else "int", "label") for t in tasks))
    return DatasetSchema(name=record["dataset"], raw_columns=raw, features=features, tasks=tuple(tasks),
                         raw_files=tuple(record["raw_files"]))


def acquire_declared(name: str, cfg: DatasetConfig, out_dir: Path, root: Path = Path(".")) -> dict[str, Any]:
    """acquire@D of a declared dataset: `out_dir/<key>.parquet` in codes, schema.json and source.json, atomically."""
    files = locate(name, cfg, root)
    drop = (cfg.features or FeaturesConfig()).drop
    frames = {key: read_table(path, skip=drop, skip_hint=f", or list it in datasets.{name}.features.drop")
              for key, path in files.items()}
    record, coded = declare(name, cfg, frames, {k: str(p) for k, p in files.items()})
    with atomic_dir(out_dir) as tmp:
        for key, frame in coded.items():
            to_parquet(frame, tmp / f"{key}.parquet")
        write_json(tmp / SCHEMA_FILE, record)
        info = {"source": "local", "standin": False, "declared": True, "dataset": name,
                "files": {k: {"rows": len(frames[k]), "path": str(p), "sha256": sha256_file(p)}
                          for k, p in files.items()}}
        (tmp / "source.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def stage_schema(name: str, cfg: DatasetConfig, folder: Path) -> DatasetSchema:
    """The schema a stage works with: the registry's, or a declared dataset's from `folder`/schema.json (written by
    acquire@D, copied beside the splits by split@D)."""
    if not cfg.declared or name in SCHEMAS:
        return get_schema(name)
    path = Path(folder) / SCHEMA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the declared dataset's schema is missing; run acquire@{name} again")
    return schema_from_record(read_json(path))


def record(cfg: DatasetConfig, folder: Path) -> dict[str, Any] | None:
    """A declared dataset's record (schema.json in `folder`), None for a dataset of the registry."""
    return read_json(Path(folder) / SCHEMA_FILE) if cfg.declared else None
