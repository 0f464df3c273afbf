"""A split under validation, held whole when it is small and read a few columns at a time when it is not.

Great Expectations' pandas engine validates one DataFrame, and its column-map expectations filter the whole
frame by the column's nulls (a copy of every column, for each such expectation): a split of the paper's
AliExpress train (10.9 M rows x 77 columns, 4 GB) held several times over. Every expectation of the suites
reads one column (or, for the table ones, the column names and the row count), so a large split is
validated in batches: the table's expectations on a frame of its column names whose columns take no memory,
then the column expectations on frames of a few columns (`BATCH_BYTES` at most), each read from the file
when its turn comes. The project's own checks read a column at a time too (row hashes: `row_hashes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from multitab.datasets.columnar import ParquetColumns

# A larger split is read by batches of at most this size. GX copies a batch several times over, so the batch
# sets the stage's peak: at 256 MB it grew 2.9x from a tenth of Higgs to 11 M rows.
BATCH_BYTES = 64 * 1024**2
# A split up to this size is held whole and validated once: the stages' default. Each batch pays GX's fixed
# cost again (about 0.3 s a split of ACS Income at full size, 112 MB: validate_processed 6.6-6.8 s whole
# against 7.2-8.3 s in two batches), and holding it costs about 30 MB more at that size.
WHOLE_BYTES = 128 * 1024**2


class SplitData:
    """One split: a DataFrame, or a Parquet file held whole up to `whole_bytes` (default `batch_bytes`; then
    exactly today's single validation of the frame) and otherwise read by columns, `batch_bytes` a batch."""

    def __init__(self, source: pd.DataFrame | str | Path, batch_bytes: int = BATCH_BYTES,
                 whole_bytes: int | None = None) -> None:
        self.batch_bytes = batch_bytes
        whole = batch_bytes if whole_bytes is None else whole_bytes
        self._file: ParquetColumns | None = None
        self._frame: pd.DataFrame | None = None
        if isinstance(source, pd.DataFrame):
            self._frame = source
        else:
            self._file = ParquetColumns(source)
            if sum(self._file.nbytes(c) for c in self._file.columns) <= whole:
                self._frame = self._file.frame(self._file.columns)

    @property
    def n_rows(self) -> int:
        return len(self._frame) if self._frame is not None else self._file.n_rows  # type: ignore[union-attr]

    @property
    def columns(self) -> list[str]:
        return list(self._frame.columns) if self._frame is not None else list(self._file.columns)  # type: ignore[union-attr]

    def nbytes(self) -> int:
        """`frame.memory_usage().sum()` of the split read whole (for a file: from its column types)."""
        if self._frame is not None:
            return int(self._frame.memory_usage().sum())
        file = self._file
        assert file is not None
        return int(pd.RangeIndex(file.n_rows).memory_usage()) + sum(file.nbytes(c) for c in file.columns)

    @property
    def frame(self) -> pd.DataFrame | None:
        """The whole split, if it is held."""
        return self._frame

    def series(self, name: str) -> pd.Series:
        return self._frame[name] if self._frame is not None else self._file.series(name)  # type: ignore[union-attr]

    def batches(self, expectations: Sequence[Any]) -> Iterator[tuple[pd.DataFrame, list[Any]]]:
        """(frame, the expectations to validate on it), covering `expectations`: first the table's (and those
        of columns the split lacks) on a frame of the split's columns that hold nothing, then the rest on
        frames of whole columns, `batch_bytes` at most each (at least one column)."""
        assert self._file is not None, "a split held whole is validated in one frame"
        present = set(self._file.columns)
        by_column: dict[str, list[Any]] = {}
        table = []
        for e in expectations:
            column = getattr(e, "column", None)
            if column is None or column not in present:
                table.append(e)
            else:
                by_column.setdefault(column, []).append(e)
        nothing = np.broadcast_to(np.int8(0), self.n_rows)  # read-only, no memory per row
        yield pd.DataFrame({c: nothing for c in self._file.columns}, copy=False), table
        group: list[str] = []
        size = 0
        for column in list(by_column):
            n = self._file.nbytes(column)
            if group and size + n > self.batch_bytes:
                yield self._file.frame(group), [e for c in group for e in by_column[c]]
                group, size = [], 0
            group.append(column)
            size += n
        if group:
            yield self._file.frame(group), [e for c in group for e in by_column[c]]


def row_hashes(split: SplitData, *, index: bool = False) -> np.ndarray:
    """`pd.util.hash_pandas_object(frame, index=index)` of the split, a column at a time: each column's
    hash combined as pandas combines them (pandas.core.util.hashing.combine_hash_arrays), the index's (the
    frame's RangeIndex) last."""
    columns = split.columns
    hashes: Iterator[np.ndarray] = (
        pd.util.hash_pandas_object(split.series(name), index=False).to_numpy() for name in columns)
    if index:
        rows = pd.RangeIndex(split.n_rows)
        hashes = itertools.chain(hashes, [pd.util.hash_pandas_object(rows, index=False).to_numpy()])
    n_items = len(columns) + index
    out = np.full(split.n_rows, 0x345678, dtype=np.uint64)
    mult = np.uint64(1000003)
    for i, h in enumerate(hashes):
        out ^= h
        out *= mult
        inverse_i = n_items - i
        mult += np.uint64(82520 + inverse_i + inverse_i)
    out += np.uint64(97531)
    return out
