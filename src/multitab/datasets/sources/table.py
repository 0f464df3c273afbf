"""A declared dataset's file (multitab.datasets.declared) read whole into a frame by the paper's datasets' reader
(readers.FileReader), so that a bad file fails as it does there, with the same message: not there or empty,
compressed otherwise than with gzip or cut short, a zip archive or UTF-16 text under a CSV name, bytes that are not
UTF-8 (line and column), a row with too few or too many cells (its line), a header naming a column twice, a Parquet
column of a type that is not read (a list or struct per cell: column and type), no data rows.

A CSV's delimiter is `,`, `;` or tab, whichever its header line holds most of (UCI's files use `;`). Its cells are
read as text and given the types `pandas.read_csv` gives them (numbers where every cell is one, else true/false
values, else text; pandas' missing-value spellings): the frame is the one `read_csv` reads from a good file.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from multitab.datasets.sources.formats import BLOCK_BYTES, arrow_stream, file_kind
from multitab.datasets.sources.readers import FileReader

DELIMITERS = (",", ";", "\t")
# pandas.read_csv's default missing-value spellings (tests/test_declared.py compares them with pandas' own)
PANDAS_NULLS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
                "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")
_TRUE, _FALSE = {"True", "TRUE", "true"}, {"False", "FALSE", "false"}


class TableReader(FileReader):
    """Every column of one CSV or Parquet file. `skip`: columns whose Parquet type is not checked (they are
    dropped after reading); `skip_hint`: how to drop one, added to a refused column's message."""

    def __init__(self, path: Path, label: str | None = None, skip: Collection[str] = (), skip_hint: str = "") -> None:
        super().__init__(path, label)
        self.skip, self.skip_hint = set(skip), skip_hint

    def header(self) -> list[str]:
        """The column names, without reading the rows (checked: no name twice)."""
        self.check_file("a header line with the column names, then the rows")
        if file_kind(self.path, self.label) == "parquet":
            with self.parquet_file() as f:
                self.names = list(f.schema_arrow.names)
            self.check_names(self.names, header="Parquet schema")
            return self.names
        line = self.first_text()
        self.delimiter = max(DELIMITERS, key=line.count)
        # an empty name is named as read_csv names it (a frame's index written without a name)
        self.names = [name or f"Unnamed: {i}" for i, name in enumerate(self._first_line())]
        self.check_names(self.names, header="header")
        return self.names

    def frame(self) -> pd.DataFrame:
        names = self.header()
        if file_kind(self.path, self.label) == "parquet":
            with self.parquet_file() as f:
                self.check_types(f.schema_arrow, [n for n in names if n not in self.skip], self.skip_hint)
                table = pa.Table.from_batches(list(self.parquet_batches(f, names)), schema=f.schema_arrow)
            if table.num_rows == 0:
                raise self.no_rows()
            return table.to_pandas()
        self.line_offset = 1
        read = pacsv.ReadOptions(block_size=BLOCK_BYTES, column_names=names, skip_rows=1)
        # a quoted cell may hold a line end (free text), as read_csv reads it
        parse = pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=True)
        batches = list(self._csv_stream(lambda: arrow_stream(self.path), read, parse))
        if not sum(b.num_rows for b in batches):
            raise self.no_rows()
        table = pa.Table.from_batches(batches)
        return pd.DataFrame({name: _as_read_csv(table.column(i)) for i, name in enumerate(names)})

    def _convert_options(self, types: dict[str, pa.DataType] | None = None) -> pacsv.ConvertOptions:
        return pacsv.ConvertOptions(column_types=dict.fromkeys(self.names, pa.string()), null_values=PANDAS_NULLS,
                                    strings_can_be_null=True, quoted_strings_can_be_null=True)


def _as_read_csv(cells: pa.ChunkedArray) -> pd.Series:
    """A column of text cells (None: missing) with the type pandas.read_csv gives it: numbers where every cell
    is one (integers; floats where one is missing or fractional), true/false where every cell is one, else text."""
    values = pd.Series(cells.to_numpy(zero_copy_only=False), dtype=object)
    try:
        return pd.to_numeric(values)  # the parser read_csv converts numbers with (" 5" and "+5" are 5)
    except (ValueError, TypeError):
        pass
    present = set(values.dropna())
    if present and present <= _TRUE | _FALSE:
        flags = values.map(lambda v: np.nan if v is None else v in _TRUE)
        return flags if values.isna().any() else flags.astype(bool)
    return pd.Series(values.tolist())


def read_table(path: Path, label: str | None = None, skip: Collection[str] = (), skip_hint: str = "") -> pd.DataFrame:
    """Every column of a CSV (.csv, .csv.gz) or Parquet file as `TableReader` reads it."""
    return TableReader(path, label, skip, skip_hint).frame()


def read_header(path: Path, label: str | None = None) -> list[str]:
    """The column names of a CSV or Parquet file (its header line, or its Parquet schema)."""
    return TableReader(path, label).header()
