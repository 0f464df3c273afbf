"""Raw batches -> the schema's typed raw columns (in schema order; float -> float32, int -> int64),
checked strictly: every problem raises SourceError naming the file, the column and, where it applies, the
row, and saying what to do. `read_raw_table` / `read_raw_file` read one file; `write_raw_parquet` writes one
to Parquet a row group at a time (what acquire does)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from multitab.datasets.columnar import ROW_GROUP_ROWS, parquet_options
from multitab.datasets.schema import DatasetSchema, Feature, RawColumn
from multitab.datasets.sources.formats import (
    FLOAT32_MAX,
    MAX_EXACT_INT,
    SourceError,
    allowed_values,
    is_number,
)
from multitab.datasets.sources.readers import Reader

log = logging.getLogger(__name__)


def _numeric(arr: pa.Array, reader: Reader, name: str, row0: int) -> pa.Array:
    """`arr` as a numeric array; text that is not a number is an error naming the row."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_boolean(arr.type):
        return pc.cast(arr, pa.int64())
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        return arr
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        try:
            return pc.cast(arr, pa.float64())
        except pa.ArrowInvalid:
            # (Python's float() takes '52_000'; Arrow, like a CSV reader, does not: the strict test)
            for i, v in enumerate(arr.to_pylist()):
                if v is not None and ("_" in v or not is_number(v.strip())):
                    raise SourceError(
                        f"{reader.where(name, row0 + i)}: value {v!r} is not a number (wrong dtype: the column "
                        "must be numeric); fix the file or check that it is the right one"
                    ) from None
            raise SourceError(f"{reader.where(name)}: text that Arrow cannot read as a number; the column "
                              "must be numeric") from None
    raise SourceError(
        f"{reader.where(name)}: has type {arr.type}, expected a number (wrong dtype); fix the file or check "
        "that it is the right one"
    )



def _first(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _convert_batch(
    batch: pa.RecordBatch, reader: Reader, row0: int, allowed: dict[str, tuple[float, ...]]
) -> pa.RecordBatch:
    arrays = []
    features = {f.name: f for f in reader.schema.features}
    for col in reader.schema.raw_columns:
        arr = _numeric(batch.column(col.name), reader, col.name, row0)
        arrays.append(_typed(arr, col, reader, row0, allowed.get(col.name), features.get(col.name)))
    return pa.RecordBatch.from_arrays(arrays, names=reader.names)


def _typed(
    arr: pa.Array,
    col: RawColumn,
    reader: Reader,
    row0: int,
    allowed: tuple[float, ...] | None,
    feature: Feature | None = None,
) -> pa.Array:
    name = col.name
    levels = feature.levels if feature is not None else None
    if arr.null_count or (pa.types.is_floating(arr.type) and pc.any(pc.is_nan(arr)).as_py()):
        missing = (
            pc.or_kleene(pc.is_null(arr), pc.is_nan(arr))
            if pa.types.is_floating(arr.type)
            else pc.is_null(arr)
        )
        missing = pc.fill_null(missing, True)
        if levels is not None:
            raise SourceError(
                f"{reader.where(name, row0 + _first(missing))}: missing value in a level-coded column (its values "
                f"are the published levels {_levels_text(levels)}); a missing b-tag cannot be coded: fix or drop "
                "such rows in the source file"
            )
        if col.role == "label":
            raise SourceError(
                f"{reader.where(name, row0 + _first(missing))}: missing value (NaN) in a label column; every "
                "row needs its labels: fix or drop such rows in the source file"
            )
        if col.dtype == "int":
            raise SourceError(
                f"{reader.where(name, row0 + _first(missing))}: missing value in an integer column; "
                "fill it (e.g. with a code for 'unknown') or drop such rows in the source file"
            )
    if pa.types.is_floating(arr.type) and col.dtype == "float":
        # Label sources (e.g. PINCP before its income threshold) must be finite; no value may overflow float32.
        f64 = pc.cast(arr, pa.float64())
        too_big = pc.fill_null(pc.greater(pc.abs(f64), FLOAT32_MAX), False)
        if pc.any(too_big).as_py():
            i = _first(too_big)
            value = f64[i].as_py()
            what = "infinite" if value in (float("inf"), float("-inf")) else "beyond the float32 range (±3.4e38)"
            role = "a label source" if col.role == "label" else "a feature"
            raise SourceError(
                f"{reader.where(name, row0 + i)}: value {value!r} is {what} in {role} column; it would become inf "
                "(and a wrong label or input): fix or drop such rows in the source file"
            )
    if levels is not None:
        _, bad = feature.level_code(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False))  # type: ignore[union-attr]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SourceError(
                f"{reader.where(name, row0 + i)}: value {arr[i].as_py()!r} is none of the column's published levels "
                f"{_levels_text(levels)}; check that the file is the {reader.schema.name} release with its columns "
                "in the release's order"
            )
    if allowed is not None:
        ok = pc.fill_null(
            pc.is_in(pc.cast(arr, pa.float64()), value_set=pa.array(allowed, pa.float64())), True
        )
        if not pc.all(ok).as_py():
            i = _first(pc.invert(ok))
            shown = [int(a) if float(a).is_integer() else a for a in allowed]
            raise SourceError(
                f"{reader.where(name, row0 + i)}: label value {arr[i].as_py()!r} is outside its classes {shown}; "
                "check that the file is the right one and its labels are coded as the schema expects"
            )
    if col.dtype == "float":
        return pc.cast(arr, pa.float32())
    if pa.types.is_integer(arr.type):
        try:
            return pc.cast(arr, pa.int64())
        except pa.ArrowInvalid:  # an unsigned value above the int64 range
            big = pc.fill_null(pc.greater(arr, pa.scalar(2**63 - 1, arr.type)), False)
            i = _first(big)
            raise SourceError(
                f"{reader.where(name, row0 + i)}: value {arr[i].as_py()!r} is beyond the 64-bit integer range "
                "(an integer code cannot be that large); fix the file or check that it is the right one"
            ) from None
    f64 = pc.cast(arr, pa.float64())
    bad = pc.or_(pc.not_equal(f64, pc.floor(f64)), pc.greater_equal(pc.abs(f64), MAX_EXACT_INT))
    bad = pc.fill_null(bad, False)
    if pc.any(bad).as_py():
        i = _first(bad)
        raise SourceError(
            f"{reader.where(name, row0 + i)}: value {f64[i].as_py()!r} is not an integer (wrong dtype: the column "
            "holds integer codes); fix the file or check that it is the right one"
        )
    return pc.cast(f64, pa.int64())


def _levels_text(levels: tuple[float, ...]) -> str:
    return "{" + ", ".join(f"{v:.4f}" for v in levels) + "}"


def _typed_batches(path: Path, schema: DatasetSchema, file_key: str, label: str) -> Iterator[pa.RecordBatch]:
    """The file's batches converted to the schema's typed raw columns (checked as they come)."""
    if file_key not in schema.raw_files:
        raise ValueError(f"{schema.name} has no raw file {file_key!r}; raw files: {list(schema.raw_files)}")
    reader = Reader(path, schema, file_key, label)
    reader.check_file(f"the columns {reader.names}")
    allowed = allowed_values(schema)
    rows = 0
    for batch in reader.batches():
        yield _convert_batch(batch, reader, rows, allowed)
        rows += batch.num_rows
    if rows == 0:
        raise reader.no_rows()


def _target(schema: DatasetSchema) -> pa.Schema:
    return pa.schema([(c.name, pa.float32() if c.dtype == "float" else pa.int64()) for c in schema.raw_columns])


class RawSummary:
    """What acquire reports about a raw file once it is read: its rows, the missing values of each float
    feature column, and the min and max of the columns the study drops as constant (not the ids)."""

    def __init__(self, schema: DatasetSchema) -> None:
        self.rows = 0
        self.missing = dict.fromkeys(
            (c.name for c in schema.raw_columns if c.dtype == "float" and c.role != "label"), 0
        )
        self.dropped = [c.name for c in schema.raw_columns if c.role == "drop" and not c.name.endswith("_id")]
        self.min_max: dict[str, tuple[Any, Any]] = {}

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        self.rows += batch.num_rows
        for name in self.missing:
            col = batch.column(name)
            self.missing[name] += col.null_count + int(pc.sum(pc.is_nan(col)).as_py() or 0)
        for name in self.dropped:
            mm = pc.min_max(batch.column(name)).as_py()
            if name in self.min_max:
                lo, hi = self.min_max[name]
                mm = {"min": _pick(min, lo, mm["min"]), "max": _pick(max, hi, mm["max"])}
            self.min_max[name] = (mm["min"], mm["max"])

    def log(self, path: Path, schema: DatasetSchema) -> None:
        missing = {k: v for k, v in self.missing.items() if v}
        if missing:
            log.warning("%s: missing values in feature columns (kept as NaN): %s", path, missing)
        log.info("%s: read %d rows x %d columns", path, self.rows, len(schema.raw_columns))


def _pick(f: Callable[..., Any], a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else f(a, b)


def read_raw_table(path: str | Path, schema: DatasetSchema, file_key: str, label: str | None = None) -> pa.Table:
    """`read_raw_file` as an Arrow table (no pandas copy). `label` names the file in messages (default: its
    path; an archive member: `archive.zip:train.csv`)."""
    path = Path(path)
    table = pa.Table.from_batches(list(_typed_batches(path, schema, file_key, label or str(path))),
                                  schema=_target(schema))
    summary = RawSummary(schema)
    summary.add(table)
    summary.log(path, schema)
    return table


def write_raw_parquet(
    path: str | Path, target: Path, schema: DatasetSchema, file_key: str, label: str | None = None
) -> RawSummary:
    """Read raw file `path` as `read_raw_table` does and write it to Parquet file `target` as it goes
    (row groups of pyarrow's default 1,048,576 rows: the file `pq.write_table(read_raw_table(...))`
    writes with the project's `columnar.parquet_options`), holding one row group at a time. What acquire
    writes to data/raw/<D>/."""
    path = Path(path)
    summary = RawSummary(schema)
    pending: list[pa.RecordBatch] = []
    n_pending = 0
    with pq.ParquetWriter(target, _target(schema), **parquet_options(_target(schema))) as writer:
        for batch in _typed_batches(path, schema, file_key, label or str(path)):
            summary.add(batch)
            pending.append(batch)
            n_pending += batch.num_rows
            while n_pending >= ROW_GROUP_ROWS:
                table = pa.Table.from_batches(pending, schema=_target(schema))
                writer.write_table(table.slice(0, ROW_GROUP_ROWS))
                rest = table.slice(ROW_GROUP_ROWS)
                pending, n_pending = rest.to_batches(), rest.num_rows
        if n_pending:
            writer.write_table(pa.Table.from_batches(pending, schema=_target(schema)))
    summary.log(path, schema)
    return summary


def read_raw_file(path: str | Path, schema: DatasetSchema, file_key: str) -> pd.DataFrame:
    """Read one raw file into the schema's raw columns, in schema order (float32 / int64), strictly checked:
    missing column, non-numeric value, empty file, header only, NaN in a label, a label outside its classes
    each raise `SourceError`. Extra columns are ignored (logged)."""
    return read_raw_table(path, schema, file_key).to_pandas()
