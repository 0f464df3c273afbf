"""Tables too large to hold: Parquet files read a column (or a few) at a time, columns parked on disk, and
Parquet files written from parked columns in row groups.

A data stage at the paper's sizes (AliExpress: 17.7 M rows x 82 columns, ~7 GB in memory) holds one column
or one row group at a time. Files are written as `to_parquet` (below) writes a frame
(`DataFrame.to_parquet(path, index=False)` with the project's `parquet_options`: the same pandas schema
metadata, snappy, dictionaries for the non-float columns only, row groups of pyarrow's default 1,048,576
rows), so the bytes do not depend on whether a table was written whole or from its columns
(tests/test_columnar.py compares them).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from multitab.files.io import TMP_SUFFIX, disk_full_names

ROW_GROUP_ROWS = 1024 * 1024  # pyarrow's default maximum row-group length (what to_parquet writes)


def parquet_options(schema: pa.Schema) -> dict[str, object]:
    """How every data file of the project is written (ParquetWriter / write_table / to_parquet keywords):
    snappy, and dictionary encoding for the columns that are not floating point. A float column has about as
    many values as rows: pyarrow's default builds a dictionary per column chunk and throws it away at 1 MB
    (Higgs stand-in, 1 M rows: 3.7 CPU-s to write against 0.3, files 148 vs 102 MB)."""
    return {"compression": "snappy", "use_dictionary": [f.name for f in schema if not pa.types.is_floating(f.type)]}


def to_parquet(df: pd.DataFrame, path: str | Path) -> None:
    """`df.to_parquet(path, index=False)` with `parquet_options` (a full disk: DiskFullError naming `path`)."""
    with disk_full_names(path):
        df.to_parquet(path, index=False, **parquet_options(pa.Schema.from_pandas(df, preserve_index=False)))


class ParquetColumns:
    """One Parquet file, read by columns with `pd.read_parquet`'s semantics (dtypes, NaN for nulls); opening
    it reads only the footer."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta = pq.read_metadata(self.path)
        self.n_rows = meta.num_rows
        schema = meta.schema.to_arrow_schema()
        index = {c for c in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)}
        self.columns = [name for name in schema.names if name not in index]
        self._types = {f.name: f.type for f in schema}

    def frame(self, names: Sequence[str]) -> pd.DataFrame:
        frame = pd.read_parquet(self.path, columns=list(names))
        # Arrow's allocator keeps the decode buffers freed by the read (and by the previous reads' frames, since
        # dropped) for reuse: a stage reading one column after another held a few columns' worth more.
        pa.default_memory_pool().release_unused()
        return frame

    def series(self, name: str) -> pd.Series:
        return self.frame([name])[name]

    def chunks(self, name: str) -> Iterator[np.ndarray]:
        """Column `name` a row group at a time, the values `series(name).to_numpy()` holds: by row groups
        where each one converts as the whole column does (floating columns; integers and booleans without
        nulls), else whole."""
        t = self._types.get(name)
        file = pq.ParquetFile(self.path)
        meta = file.metadata
        leaves = [meta.schema.column(i).path for i in range(meta.num_columns)]
        index = leaves.index(name) if name in leaves else -1
        by_groups = t is not None and index >= 0 and (
            pa.types.is_floating(t)
            or ((pa.types.is_integer(t) or pa.types.is_boolean(t)) and all(
                meta.row_group(i).column(index).statistics is not None
                and meta.row_group(i).column(index).statistics.has_null_count
                and meta.row_group(i).column(index).statistics.null_count == 0
                for i in range(meta.num_row_groups)))
        )
        if not by_groups or meta.num_row_groups <= 1:
            yield self.series(name).to_numpy()
            return
        for i in range(meta.num_row_groups):
            yield file.read_row_group(i, columns=[name]).column(0).to_pandas().to_numpy()
            pa.default_memory_pool().release_unused()

    def nbytes(self, name: str) -> int:
        """Bytes of column `name` in memory (8 per value where the width is not fixed)."""
        t = self._types.get(name)
        width = t.bit_width // 8 if t is not None and pa.types.is_primitive(t) and t.bit_width >= 8 else 8
        return width * self.n_rows


class ColumnStore:
    """Columns parked on disk, one raw file each (`key`: any string), written whole or appended in
    pieces and read back in row ranges with ordinary reads (no memory map: the pages read do not stay in
    the process). Threads may use it at once, each with its own keys; another process works on a copy (it
    pickles without its lock) and parks in a folder of its own, which this store then `adopt`s."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: dict[str, Path] = {}
        self._dtypes: dict[str, np.dtype] = {}
        self._rows: dict[str, int] = {}
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        with self._lock:
            if key not in self._files:
                self._files[key] = self.folder / f"{len(self._files)}.bin"
            return self._files[key]

    def __getstate__(self) -> dict[str, object]:
        # A copy taken under the lock: a process pool pickles its jobs' arguments on a thread of its own,
        # while this process may be adopting another store's columns into this one.
        with self._lock:
            return {k: dict(v) if isinstance(v, dict) else v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def adopt(self, other: ColumnStore) -> None:
        """Take over the columns `other` parked (its files stay where they are; its keys are new here)."""
        with self._lock:
            for key, path in other._files.items():
                if key in other._dtypes:
                    self._files[key] = path
                    self._dtypes[key], self._rows[key] = other._dtypes[key], other._rows[key]

    def dtype(self, key: str) -> np.dtype:
        return self._dtypes[key]

    def append(self, key: str, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values)
        if key not in self._dtypes:
            self._path(key).unlink(missing_ok=True)
            with self._lock:
                self._dtypes[key], self._rows[key] = values.dtype, 0
        elif values.dtype != self._dtypes[key]:
            raise TypeError(f"column {key!r}: {values.dtype}, parked as {self._dtypes[key]}")
        with self._path(key).open("ab") as f:
            values.tofile(f)
        with self._lock:
            self._rows[key] += len(values)

    def put(self, key: str, values: np.ndarray) -> None:
        self.drop(key)
        self.append(key, values)

    def drop(self, key: str) -> None:
        if key in self._dtypes:
            self._path(key).unlink(missing_ok=True)
            with self._lock:
                self._rows[key] = 0

    def rows(self, key: str) -> int:
        return self._rows[key]

    def reader(self, prefix: str) -> Callable[[str, int, int], np.ndarray]:
        """`write_parquet_columns`' `read` for the columns parked as `<prefix><name>`."""
        return lambda name, start, stop: self.get(prefix + name, start, stop)

    def get(self, key: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        dtype, n = self._dtypes[key], self._rows[key]
        stop = n if stop is None else min(stop, n)
        count = max(stop - start, 0)
        if count == 0:
            return np.empty(0, dtype)
        return np.fromfile(self._path(key), dtype=dtype, count=count, offset=start * dtype.itemsize)


@contextlib.contextmanager
def column_store(folder: Path) -> Iterator[ColumnStore]:
    """A ColumnStore in a scratch folder inside `folder`, removed at the end. `folder` is the temporary folder
    of the output being written (multitab.files.io.atomic_dir): a run killed with SIGKILL leaves the scratch
    inside that temporary, which the stage's next run removes with it (multitab.files.io.remove_stale_temporaries)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".columns.", suffix=TMP_SUFFIX, dir=folder) as d:
        yield ColumnStore(Path(d))


def pandas_schema(dtypes: Mapping[str, np.dtype | type]) -> pa.Schema:
    """The Arrow schema (with pandas metadata) that `DataFrame.to_parquet(index=False)` writes for a frame
    of these columns."""
    empty = pd.DataFrame({name: np.empty(0, dtype=dt) for name, dt in dtypes.items()})
    return pa.Schema.from_pandas(empty, preserve_index=False)


def write_parquet_columns(
    path: Path, dtypes: Mapping[str, np.dtype | type], n_rows: int, read: Callable[[str, int, int], np.ndarray]
) -> None:
    """Write `path` from columns that `read(name, start, stop)` gives a row range of, one row group
    (ROW_GROUP_ROWS) at a time: the file `to_parquet(pd.DataFrame(columns), path)` writes."""
    schema = pandas_schema(dtypes)
    with disk_full_names(path), pq.ParquetWriter(path, schema, **parquet_options(schema)) as writer:
        for start in range(0, max(n_rows, 1), ROW_GROUP_ROWS):
            stop = min(n_rows, start + ROW_GROUP_ROWS)
            # from_pandas: NaN becomes null, as Table.from_pandas makes it
            arrays = [pa.array(read(name, start, stop), type=schema.field(name).type, from_pandas=True)
                      for name in dtypes]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
