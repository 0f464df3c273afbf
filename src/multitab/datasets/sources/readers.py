"""Streaming readers of one raw file (CSV, gzipped CSV, Parquet, ARFF): batches of the schema's raw
columns as read (untyped), with the file's name, column and row for messages. Files are streamed in large
blocks with pyarrow (Higgs is 11 M rows, 2.6 GB gzipped).

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


class Reader(CsvDiagnostics):
    """Batches of the raw columns (untyped as read) plus how to name rows in messages."""

    def __init__(self, path: Path, schema: DatasetSchema, file_key: str, label: str | None = None) -> None:
        self.path = path
        # The name the user knows the file by (e.g. `AliExpress_NL.zip:train.csv` for an archive member).
        self.label = label or str(path)
        self.schema = schema
        self.file_key = file_key
        self.names = [c.name for c in schema.raw_columns]
        self.line_offset: int | None = None  # file line of data row 0, minus 1 (None: no lines)

    def where(self, column: str, row: int | None = None) -> str:
        at = f"{self.label}: column {column!r}"
        if row is not None:
            at += f", row {row + 1}"
            if self.line_offset is not None:
                at += f" (line {row + 1 + self.line_offset})"
        return at

    def check_columns(self, present: list[str], *, header: str) -> None:
        dup = sorted({c for c in present if present.count(c) > 1})
        if dup:
            raise SourceError(f"{self.label}: duplicate column(s) {dup} in the {header}; fix the file")
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
        try:
            f = pq.ParquetFile(self.path)
        except (pa.ArrowInvalid, OSError) as e:
            raise SourceError(
                f"{self.label}: not a readable Parquet file ({e}); re-create or re-download it"
            ) from e
        with f:
            self.check_columns(list(f.schema_arrow.names), header="Parquet schema")
            try:
                yield from f.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=self.names)
            except (OSError, pa.ArrowInvalid) as e:
                raise SourceError(
                    f"{self.label}: damaged Parquet file ({e}); re-create or re-download it"
                ) from e

    # -- csv
    def _first_line(self) -> list[str]:
        try:
            with open_binary(self.path) as f:
                raw = next(iter_lines(f), (b"", 0))[0]
        except (OSError, EOFError, zlib.error) as e:
            raise SourceError(
                f"{self.label}: cannot read line 1 ({e}){compression_note(self.path)}; the file is damaged or "
                "cut short: re-download or re-create it"
            ) from e
        try:
            line = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise SourceError(
                f"{self.label} line 1: byte {raw[e.start:e.start + 1]!r} at position {e.start + 1} is not UTF-8 "
                "text; save the file as UTF-8 (or plain ASCII) CSV"
            ) from e
        if not line.strip():
            raise SourceError(f"{self.label}: the file is empty; expected the columns {self.names}")
        return next(csv.reader([line]))

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
