"""The data steps behind the DVC stages acquire@D, split@D and preprocess@D (stage scripts stay thin).

Each step reads a folder and writes a folder atomically: on any error the previous output stays as it was.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.config.data import DatasetConfig, FeaturesConfig
from multitab.datasets.columnar import ROW_GROUP_ROWS, ParquetColumns, column_store, write_parquet_columns
from multitab.datasets.declared import SCHEMA_FILE, split_record
from multitab.datasets.preprocess_columns import preprocess_files
from multitab.datasets.schema import DatasetSchema
from multitab.datasets.split import (
    SPLITS,
    SplitError,
    canonical_column,
    canonical_sources,
    check_raw_columns,
    may_reject,
    split_rows,
)
from multitab.datasets.split_classes import cover_classes
from multitab.datasets.standin import write_standin
from multitab.files.io import atomic_dir, read_json, sha256_file, write_json

log = logging.getLogger(__name__)

SOURCE_FILE = "source.json"
INFO_FILE = "info.json"
META_FILE = "meta.json"


def acquire(schema: DatasetSchema, cfg: DatasetConfig, out_dir: Path, cache_dir: Path) -> dict[str, Any]:
    """Produce `out_dir/<raw file>.parquet` for every raw file of the dataset, plus source.json."""
    with atomic_dir(out_dir) as tmp:
        if cfg.source == "standin":
            rows = write_standin(schema, cfg.standin.rows, cfg.standin.seed, tmp)
            info: dict[str, Any] = {
                "source": "standin",
                "standin": True,
                "seed": cfg.standin.seed,
                "files": {k: {"rows": n} for k, n in rows.items()},
            }
        elif cfg.source == "local":
            from multitab.datasets.sources import acquire_local

            info = acquire_local(schema, cfg.local, tmp)
        else:
            from multitab.datasets.sources import acquire_remote

            info = acquire_remote(schema, cfg.remote, tmp, cache_dir)
        info["dataset"] = schema.name
        (tmp / SOURCE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def split(schema: DatasetSchema, cfg: DatasetConfig, raw_dir: Path, out_dir: Path, *,
          declared: dict[str, Any] | None = None) -> dict[str, Any]:
    """Raw files -> canonical train / val / test Parquet + info.json, a column at a time: the label columns
    decide the rows of each split (`split_rows`), then every column is made canonical, cut into the splits
    and parked on disk, and each split's file is written from the parked columns by row groups (the bytes
    `split_frames` + `to_parquet` give). `declared`: a declared dataset's record (schema.json), written beside the
    splits; its splits hold a row of every class of every task (`split_classes.cover_classes`), and a feature
    holding one value in the training split is left out (`features.constant: drop`, its record's `constant`) or
    refused (`refuse`)."""
    source = read_json(raw_dir / SOURCE_FILE)
    files = {key: ParquetColumns(raw_dir / f"{key}.parquet") for key in schema.raw_files}
    sources = canonical_sources(schema)
    # split_rows reads the classification labels only (regression targets neither stratify nor get rejected)
    classes = [t.name for t in schema.tasks if t.type != "regression"]
    labels = {}
    for key, raw in files.items():
        check_raw_columns(schema, raw.columns, str(raw.path))
        # Only level-coded features and coded labels can be rejected: checked first, in canonical order, one
        # column held at a time (the classification labels kept).
        kept = {}
        for name in sources:
            if may_reject(schema, name) or name in classes:
                col = _canonical(schema, name, raw, sources[name])
                if name in classes:
                    kept[name] = col
                del col
        labels[key] = pd.DataFrame(kept, index=pd.RangeIndex(raw.n_rows), columns=classes)
        del kept
    if declared is None:
        rows = split_rows(schema, labels, cfg.split)
    else:
        rows = _declared_rows(schema, cfg, labels, declared, source)
    del labels
    info = {
        "dataset": schema.name,
        "source": source["source"],
        "standin": bool(source["standin"]),
        "n_rows": {k: len(rows[k][1]) for k in SPLITS},
    }
    features = {f.name for f in schema.features}
    constant: dict[str, Any] = {}  # a declared dataset's features holding one value in train -> that value
    with atomic_dir(out_dir) as tmp, column_store(tmp) as parked:  # scratch inside: a kill leaves one temporary
        dtypes: dict[str, np.dtype] = {}
        jobs = [(name, key, raw) for name in sources for key, raw in files.items()]
        for (name, key, _raw), col in _canonical_ahead(schema, sources, jobs):
            if name in constant:
                continue
            if declared is not None and name in features and key == rows["train"][0]:
                one = _one_value(col[rows["train"][1]])
                if one is not None:
                    levels = declared["levels"].get(name)  # a categorical feature's code -> its value in the file
                    value = levels[int(one[0])] if levels is not None and one[0] is not None else one[0]
                    constant[name] = _left_out(schema.name, cfg, name, value, len(rows["train"][1]))
                    dtypes.pop(name, None)
                    for k in SPLITS:
                        parked.drop(f"{k}/{name}")
                    continue
            dtypes[name] = col.dtype
            for k in SPLITS:
                if rows[k][0] == key:
                    idx = rows[k][1]
                    parked.put(f"{k}/{name}", col[idx[:ROW_GROUP_ROWS]])  # a block at a time, not a copy
                    for start in range(ROW_GROUP_ROWS, len(idx), ROW_GROUP_ROWS):
                        parked.append(f"{k}/{name}", col[idx[start : start + ROW_GROUP_ROWS]])
            del col
        del rows
        if declared is not None:
            if len(constant) == len(features):
                raise SplitError(f"datasets.{schema.name}: every feature holds one value in the "
                                 f"{info['n_rows']['train']} training rows: nothing to learn from; give more rows")
            write_json(tmp / SCHEMA_FILE, split_record(declared, constant))
        for k in SPLITS:
            write_parquet_columns(tmp / f"{k}.parquet", dtypes, info["n_rows"][k], parked.reader(f"{k}/"))
            for name in sources:
                parked.drop(f"{k}/{name}")
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log.info("%s split: %s", schema.name, info["n_rows"])
    return info


def _declared_rows(schema: DatasetSchema, cfg: DatasetConfig, labels: dict[str, pd.DataFrame],
                   declared: dict[str, Any], source: dict[str, Any]) -> dict[str, tuple[str, np.ndarray]]:
    """split_rows for a declared dataset, its errors naming the params key, then every class of every task placed
    in every split (split_classes.cover_classes)."""
    try:
        rows = split_rows(schema, labels, cfg.split)
    except SplitError as e:
        hint = ("; method shuffle draws the rows at random and still gives every split a row of each class"
                if cfg.split.method == "stratified" else "")
        raise SplitError(f"datasets.{schema.name}.split: {e}{hint}") from None
    classes = {t["name"]: t.get("classes", []) for t in declared["tasks"]}
    files = {k: Path(str(f.get("path", k))).name for k, f in source.get("files", {}).items()}
    return cover_classes(schema.name, schema.tasks, labels, rows, method=cfg.split.method, seed=cfg.split.seed,
                         classes=classes, files=files)


def _one_value(values: np.ndarray) -> tuple[Any] | None:
    """(the value,) of a column whose present values are all one (None: missing in every row), else None."""
    present = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if len(present) and present.min() != present.max():
        return None
    return (present[0].item() if len(present) else None,)


def _left_out(dataset: str, cfg: DatasetConfig, name: str, value: Any, n_train: int) -> Any:
    """Feature `name` of declared `dataset` holds `value` in every training row: logged and left out (its value
    returned), or refused under `features.constant: refuse`."""
    held = "no value" if value is None else f"one value ({value!r})"
    features = cfg.features or FeaturesConfig()
    if features.constant == "refuse":
        raise SplitError(f"datasets.{dataset}.features.constant: refuse, but feature {name!r} holds {held} in all "
                         f"{n_train} training rows, which carries nothing to learn from; set constant: drop (the "
                         "default) to leave such a column out, or list it in features.drop")
    log.warning("%s: feature %r holds %s in all %d training rows: left out (datasets.%s.features.constant: drop; "
                "refuse stops instead)", dataset, name, held, n_train, dataset)
    return value


def _canonical_ahead(
    schema: DatasetSchema, sources: dict[str, str], jobs: list[tuple[str, str, ParquetColumns]]
) -> Iterator[tuple[tuple[str, str, ParquetColumns], np.ndarray]]:
    """(job, `_canonical` column of job (name, raw key, raw file)) in order, the next one read and made on a
    thread while the caller parks this one (Parquet decoding and numpy release the GIL): one more column
    held, the two cores busy."""
    with ThreadPoolExecutor(1) as side:
        make = lambda job: _canonical(schema, job[0], job[2], sources[job[0]])  # noqa: E731
        ahead = side.submit(make, jobs[0]) if jobs else None
        for i, job in enumerate(jobs):
            col = ahead.result()  # type: ignore[union-attr]
            ahead = side.submit(make, jobs[i + 1]) if i + 1 < len(jobs) else None
            yield job, col
            del col


def _canonical(schema: DatasetSchema, name: str, raw: ParquetColumns, src: str) -> np.ndarray:
    """`canonical_column` of raw column `src`, made a row group at a time (a level-coded column's codes take
    a row x level matrix)."""
    out: np.ndarray | None = None
    start = 0
    for chunk in raw.chunks(src):
        col = canonical_column(schema, name, chunk, str(raw.path), first_row=start)
        if start == 0 and len(col) == raw.n_rows:
            return col
        if out is None:
            out = np.empty(raw.n_rows, dtype=col.dtype)
        out[start : start + len(col)] = col
        start += len(col)
    return out if out is not None else canonical_column(schema, name, raw.series(src).to_numpy(), str(raw.path))


def preprocess_splits(
    schema: DatasetSchema, cfg: DatasetConfig, splits_dir: Path, out_dir: Path, *, verdict: Path | None = None,
    declared: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Canonical splits -> processed Parquet + meta.json (fit on train only, a column at a time). `verdict`:
    validate_raw's verdict, which must say success; its warnings (checks the policy let pass) travel on in
    meta.json ("validation"), into every run's metrics.json and the report's banner. `declared`: a declared
    dataset's record (multitab.datasets.declared: what was declared and inferred), kept in meta.json."""
    validation: dict[str, Any] | None = None
    if verdict is not None:
        if not Path(verdict).is_file():
            raise FileNotFoundError(f"{verdict}: validation verdict not found; run validate_raw@{schema.name} first")
        v = read_json(verdict)
        if v.get("success") is not True:
            raise ValueError(f"{verdict}: the splits of {schema.name} failed validation; see reports/validation/")
        validation = {"policy": v.get("policy", {}), "warnings": list(v.get("warnings", []))}
    info = read_json(splits_dir / INFO_FILE)
    with atomic_dir(out_dir) as tmp:
        meta = preprocess_files(schema, splits_dir, tmp, cfg.preprocess, info)
        meta["inputs"] = {f"{k}.parquet": sha256_file(splits_dir / f"{k}.parquet") for k in SPLITS}
        if validation is not None:
            meta["validation"] = validation
        if declared is not None:
            meta["declared"] = declared
        write_json(tmp / META_FILE, meta)
    return meta
