"""Streaming readers of one file (CSV, gzipped CSV, Parquet, ARFF), with the file's name, column and row for
messages. Files are streamed in large blocks with pyarrow (Higgs is 11 M rows, 2.6 GB gzipped).

`FileReader` is the one reader of a data file's bytes, for the paper's datasets and for declared ones
(sources/table.py): the file missing or empty, its compression, its encoding, its header (a name given twice is
refused), its rows, a Parquet column of a type that is not read (a list or struct per cell): each raises
SourceError naming the file and, where it applies, the line and the column. `Reader` reads a schema's raw
columns (untyped as read) with it.

ARFF is read by a small streaming reader of our own: the header (`@attribute` lines) is parsed here and
the dense `@data` section, which is CSV with `'` quotes and `?` for missing values, goes to pyarrow's CSV
reader. Sparse ARFF is not supported."""

from __future__ import annotations

import csv
import logging
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from multitab.datasets.schema import DatasetSchema
from multitab.datasets.sources.formats import (
    BLOCK_BYTES,
    NULLS,
    PARQUET_BATCH_ROWS,
    READ_ERRORS,
    CsvDiagnostics,
    SourceError,
    arrow_stream,
    compression_note,
    file_kind,
    is_number,
    iter_lines,
    open_binary,
)

log = logging.getLogger(__name__)


def type_problem(t: pa.DataType) -> str | None:
    """Why a Parquet column of type `t` cannot be read as numbers, true/false values or text; None if it can."""
    if pa.types.is_dictionary(t):
        return type_problem(t.value_type)
    if pa.types.is_nested(t):
        return "a nested type (several values per cell)"
    plain = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
             pa.types.is_large_string, pa.types.is_null)
    return None if any(test(t) for test in plain) else "neither a number, a true/false value nor text"


class FileReader(CsvDiagnostics):
    """One data file's bytes as batches, every problem of the file raised as SourceError naming it (`label`:
    the name the user knows the file by, e.g. `AliExpress_NL.zip:train.csv` for an archive member)."""

    delimiter = ","

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = path
        self.label = label or str(path)
        self.names: list[str] = []
        self.line_offset: int | None = None  # file line of data row 0, minus 1 (None: no lines)

    def where(self, column: str, row: int | None = None) -> str:
        at = f"{self.label}: column {column!r}"
        if row is not None:
            at += f", row {row + 1}"
            if self.line_offset is not None:
                at += f" (line {row + 1 + self.line_offset})"
        return at

    def check_file(self, expected: str) -> None:
        """SourceError when the file is not there or holds no bytes (`expected`: what it should hold)."""
        if not self.path.is_file():
            raise SourceError(f"{self.label}: no such file; check the path in params.yaml")
        if self.path.stat().st_size == 0:
            raise SourceError(f"{self.label}: the file is empty (0 bytes); expected {expected}")

    def no_rows(self) -> SourceError:
        return SourceError(f"{self.label}: no data rows (header only); the file is empty or was cut short")

    def check_names(self, present: list[str], *, header: str) -> None:
        """A column name given twice is refused, naming both positions: pandas would read the second as
        `name.1`, and which one a declaration or a schema means is anybody's guess."""
        seen: dict[str, int] = {}
        for i, name in enumerate(present, start=1):
            if name in seen:
                raise SourceError(f"{self.label}: the {header} names column {name!r} twice (columns {seen[name]} "
                                  f"and {i}); rename one of them (or delete the copy) in the file")
            seen[name] = i

    # -- parquet
    def parquet_file(self) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(self.path)
        except (pa.ArrowInvalid, OSError) as e:
            raise SourceError(
                f"{self.label}: not a readable Parquet file ({e}); re-create or re-download it"
            ) from e

    def check_types(self, schema: pa.Schema, names: list[str], hint: str = "") -> None:
        """SourceError for the first of columns `names` whose type is not read (a list or struct column),
        naming the column and its type; `hint`: one more way out, after the fix."""
        for name in names:
            problem = type_problem(schema.field(name).type)
            if problem is not None:
                raise SourceError(f"{self.where(name)} has type {schema.field(name).type}, {problem}, which is "
                                  f"not read here: store it as one number or text per cell{hint}")

    def parquet_batches(self, f: pq.ParquetFile, names: list[str]) -> Iterator[pa.RecordBatch]:
        try:
            yield from f.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names)
        except (OSError, pa.ArrowInvalid) as e:
            raise SourceError(f"{self.label}: damaged Parquet file ({e}); re-create or re-download it") from e

    # -- csv
    def first_text(self) -> str:
        """Line 1, decoded (a damaged compressed stream or bytes that are not UTF-8: SourceError)."""
        try:
            with open_binary(self.path) as f:
                raw = next(iter_lines(f), (b"", 0))[0]
        except (OSError, EOFError, zlib.error) as e:
            raise SourceError(
                f"{self.label}: cannot read line 1 ({e}){compression_note(self.path)}; the file is damaged or "
                "cut short: re-download or re-create it"
            ) from e
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise SourceError(
                f"{self.label} line 1: byte {raw[e.start:e.start + 1]!r} at position {e.start + 1} is not UTF-8 "
                "text; save the file as UTF-8 (or plain ASCII) CSV"
            ) from e

    def _first_line(self) -> list[str]:
        line = self.first_text()
        if not line.strip():
            raise SourceError(f"{self.label}: the file is empty; expected the columns {self.names}")
        return next(csv.reader([line], delimiter=self.delimiter))

    def _convert_options(self, types: dict[str, pa.DataType] | None = None) -> pacsv.ConvertOptions:
        raise NotImplementedError

    def _csv_stream(
        self, source: Any, read: pacsv.ReadOptions, parse: pacsv.ParseOptions
    ) -> Iterator[pa.RecordBatch]:
        rows = 0
        try:
            reader = pacsv.open_csv(
                source(), read_options=read, parse_options=parse, convert_options=self._convert_options()
            )
            for batch in reader:
                rows += batch.num_rows
                yield batch
        except READ_ERRORS as e:
            raise self._csv_error(e, source, read, parse, rows) from e

class Reader(FileReader):
    """Batches of a schema's raw columns (untyped as read) plus how to name rows in messages."""

    def __init__(self, path: Path, schema: DatasetSchema, file_key: str, label: str | None = None) -> None:
        super().__init__(path, label)
        self.schema = schema
        self.file_key = file_key
        self.names = [c.name for c in schema.raw_columns]

    def check_columns(self, present: list[str], *, header: str) -> None:
        self.check_names(present, header=header)
        missing = [c for c in self.names if c not in present]
        if missing:
            raise SourceError(
                f"{self.label}: column {missing[0]!r} is missing ({len(missing)} missing in all: {missing}); the "
                f"{header} has {present[:12]}{' ...' if len(present) > 12 else ''}. The {self.schema.name!r} "
                f"file {self.file_key!r} needs the columns {self.names}: fix the file or point params.yaml at "
                "the right one"
            )
        extra = [c for c in present if c not in self.names]
        if extra:
            log.info("%s: ignoring %d extra column(s): %s", self.label, len(extra), extra[:20])

    def batches(self) -> Iterator[pa.RecordBatch]:
        kind = file_kind(self.path, self.label)
        if kind == "parquet":
            yield from self._parquet()
        elif kind == "csv":
            yield from self._csv()
        else:
            yield from self._arff()

    # -- parquet
    def _parquet(self) -> Iterator[pa.RecordBatch]:
        with self.parquet_file() as f:
            self.check_columns(list(f.schema_arrow.names), header="Parquet schema")
            self.check_types(f.schema_arrow, self.names)
            yield from self.parquet_batches(f, self.names)

    # -- csv
    def _csv(self) -> Iterator[pa.RecordBatch]:
        first = self._first_line()
        has_header = not self.schema.headerless or set(self.names) <= set(first)
        looks_like_header = any(not is_number(v) for v in first)
        if self.schema.headerless and looks_like_header and not has_header:
            # A header whose names are not the schema's: say so instead of reading it as data.
            missing = [c for c in self.names if c not in first]
            raise SourceError(
                f"{self.label} line 1 is a header {first[:8]}{' ...' if len(first) > 8 else ''} but its names are "
                f"not the {self.schema.name} column names: expected no header ({len(self.names)} numeric columns in "
                f"the release's order: {', '.join(self.names[:4])}, ...) or a header with these names (any order); "
                f"missing: {missing[:8]}{' ...' if len(missing) > 8 else ''}. Rename the header's columns or delete "
                "the header line"
            )
        if has_header and not looks_like_header:
            raise SourceError(
                f"{self.label} line 1 holds data ({first[:5]} ...), not a header: expected a header line with the "
                f"column names {self.names[:6]} ...; add the header line (the {self.schema.name} release has one)"
            )
        if has_header:
            self.check_columns(first, header="header")
            read = pacsv.ReadOptions(block_size=BLOCK_BYTES)
            self.line_offset = 1
        else:
            if len(first) != len(self.names):
                raise SourceError(
                    f"{self.label}: this header-less file must have {len(self.names)} columns "
                    f"({', '.join(self.names)}) but line 1 has {len(first)}; is it the right file?"
                )
            read = pacsv.ReadOptions(block_size=BLOCK_BYTES, column_names=self.names)
            self.line_offset = 0
        yield from self._csv_stream(lambda: arrow_stream(self.path), read, pacsv.ParseOptions())

    def _convert_options(self, types: dict[str, pa.DataType] | None = None) -> pacsv.ConvertOptions:
        # Every raw column is parsed as float64 first (int columns checked integral later: files written by
        # other tools often spell integers "1.0"; float columns checked to fit float32 before the cast).
        if types is None:
            types = {c.name: pa.float64() for c in self.schema.raw_columns}
        return pacsv.ConvertOptions(
            column_types=types,
            include_columns=list(types),
            null_values=NULLS,
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        )

    def _arff(self) -> Iterator[pa.RecordBatch]:
        names: list[str] = []
        line_no = 0
        with open_binary(self.path) as f:
            lines = iter_lines(f)
            while True:
                raw, data_start = next(lines, (None, 0))
                if raw is None:
                    what = "no @data section" if names else "the file is empty"
                    raise SourceError(
                        f"{self.path}: not an ARFF file ({what}); expected the columns {self.names}"
                    )
                line_no += 1
                line = raw.decode("utf-8", errors="replace").strip()
                low = line.lower()
                if low.startswith("@attribute"):
                    m = re.match(r"@attribute\s+('([^']*)'|\"([^\"]*)\"|(\S+))", line, flags=re.IGNORECASE)
                    if m is None:
                        raise SourceError(f"{self.path}: line {line_no}: malformed @attribute line {line!r}")
                    names.append(next(g for g in m.groups()[1:] if g is not None))
                elif low.startswith("@data"):
                    break
        self.check_columns(names, header="ARFF header")
        self.line_offset = line_no
        read = pacsv.ReadOptions(block_size=BLOCK_BYTES, column_names=names)
        parse = pacsv.ParseOptions(quote_char="'", ignore_empty_lines=True)

        def source() -> IO[bytes]:
            fh = open_binary(self.path)
            fh.seek(data_start)
            return fh

        with source() as head:
            first = head.read(256).lstrip()
        if first.startswith(b"{"):
            raise SourceError(f"{self.path}: sparse ARFF is not supported; convert it to CSV or Parquet")
        yield from self._csv_stream(source, read, parse)
