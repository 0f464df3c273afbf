"""The `local` and `remote` sources of `acquire@<dataset>`: real files -> `<file_key>.parquet` in raw schema.

`read_raw_file` reads CSV, gzipped CSV, Parquet or ARFF into the schema's raw columns (in schema order;
float -> float32, int -> int64) and checks them strictly: every problem raises `SourceError` naming the file,
the column and, where it applies, the row, and saying what to do. Files are streamed in large blocks with
pyarrow (Higgs is 11 M rows, 2.6 GB gzipped), so memory stays near the size of the typed output.

ARFF is read by a small streaming reader of our own: the header (`@attribute` lines) is parsed here and
the dense `@data` section, which is CSV with `'` quotes and `?` for missing values, goes to pyarrow's CSV
reader. Sparse ARFF is not supported.

`acquire_local` / `acquire_remote` write `out_dir/<file_key>.parquet` for every raw file of the schema,
each atomically; if one file fails, the files this call already wrote are removed, so nothing is left
half-done. Downloads go to `cache_dir` (verified, resumable: `download.fetch`) and are reused.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import logging
import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from multitab.config.data import LocalConfig, RemoteConfig
from multitab.datasets.download import fetch
from multitab.datasets.schema import DatasetSchema, Feature, RawColumn
from multitab.io import atomic_path, sha256_file

log = logging.getLogger(__name__)

BLOCK_BYTES = 64 << 20  # CSV block per batch: few batches for 11 M rows, bounded memory per batch
PARQUET_BATCH_ROWS = 1_000_000
_NULLS = ["", "?", "NA", "N/A", "NaN", "nan", "-nan", "NULL", "null", "None"]
_DATA_SUFFIXES = (".parquet", ".pq", ".csv.gz", ".csv", ".arff.gz", ".arff")
_ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")
_FORMAT_SUFFIX = {
    "csv": ".csv",
    "csv.gz": ".csv.gz",
    "parquet": ".parquet",
    "arff": ".arff",
    "zip": ".zip",
    "tar.gz": ".tar.gz",
}
_MAX_EXACT_INT = 2**53  # integers stored as float64 are exact below this
_FLOAT32_MAX = 3.4028234663852886e38
_GZIP_MAGIC = b"\x1f\x8b"
# What reading a damaged file raises (compressed stream cut short, bad bytes): turned into SourceError.
_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowInvalid, UnicodeDecodeError)


class SourceError(ValueError):
    """Real input data that cannot be used as it is (the message names file, column, row, and the fix)."""


# --------------------------------------------------------------------------------------------------
# Reading one file


def _kind(path: Path, label: str | None = None) -> str:
    name = path.name.lower()
    for suffix, kind in ((".parquet", "parquet"), (".pq", "parquet"), (".csv.gz", "csv"), (".csv", "csv")):
        if name.endswith(suffix):
            return kind
    if name.endswith((".arff", ".arff.gz")):
        return "arff"
    raise SourceError(
        f"{label or path}: unsupported file type; use CSV (.csv), gzipped CSV (.csv.gz), Parquet (.parquet/.pq) "
        "or ARFF (.arff)"
    )


def _is_gzip(path: Path) -> bool:
    """Whether the file's bytes are gzip (sniffed: a gzip named .csv, or a plain file named .csv.gz, happen)."""
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _open_binary(path: Path) -> IO[bytes]:
    if _is_gzip(path):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def _arrow_stream(path: Path) -> pa.NativeFile:
    """The file's bytes for pyarrow's CSV reader, decompressed by what the bytes are, not by the name."""
    return pa.input_stream(str(path), compression="gzip" if _is_gzip(path) else None)


def _compression_note(path: Path) -> str:
    gz = _is_gzip(path)
    named = path.name.lower().endswith(".gz")
    if gz and not named:
        return " (the file is gzip-compressed although its name does not end in .gz: it was read as gzip)"
    if named and not gz:
        return " (the file is named .gz but is not gzip-compressed: it was read as plain text)"
    return ""


def _allowed_values(schema: DatasetSchema) -> dict[str, tuple[float, ...]]:
    """Raw label column -> the values its tasks accept (derived from the schema's Task objects)."""
    allowed: dict[str, tuple[float, ...]] = {}
    for t in schema.tasks:
        if t.type == "binary" and t.threshold is None:
            allowed[t.column] = (0.0, 1.0)
        elif t.type == "multiclass":
            codes = t.codes if t.codes is not None else tuple(range(t.n_classes or 0))
            allowed[t.column] = tuple(float(c) for c in codes)
    return allowed


class _Reader:
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
        kind = _kind(self.path, self.label)
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
            with _open_binary(self.path) as f:
                raw = f.readline()
        except (OSError, EOFError, zlib.error) as e:
            raise SourceError(
                f"{self.label}: cannot read line 1 ({e}){_compression_note(self.path)}; the file is damaged or "
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
        looks_like_header = any(not _is_number(v) for v in first)
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
        yield from self._csv_stream(lambda: _arrow_stream(self.path), read, pacsv.ParseOptions())

    def _convert_options(self, types: dict[str, pa.DataType] | None = None) -> pacsv.ConvertOptions:
        # Every raw column is parsed as float64 first (int columns checked integral later: files written by
        # other tools often spell integers "1.0"; float columns checked to fit float32 before the cast).
        if types is None:
            types = {c.name: pa.float64() for c in self.schema.raw_columns}
        return pacsv.ConvertOptions(
            column_types=types,
            include_columns=list(types),
            null_values=_NULLS,
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
        except _READ_ERRORS as e:
            raise self._csv_error(e, source, read, parse, rows) from e

    def _csv_error(
        self, e: Exception, source: Any, read: pacsv.ReadOptions, parse: pacsv.ParseOptions, rows: int
    ) -> SourceError:
        msg = str(e)
        if "Empty CSV file" in msg:
            return SourceError(f"{self.label}: the file is empty; expected the columns {self.names}")
        if "UTF8" in msg or isinstance(e, UnicodeDecodeError):
            return self._utf8_error()
        m = re.search(r"In CSV column #(\d+): CSV conversion error to \w+: invalid value '(.*)'", msg)
        if m is None:
            after = rows + (self.line_offset or 0)
            if isinstance(e, OSError | EOFError | zlib.error) or "compress" in msg.lower():
                after = max(after, self._readable_lines())
                return SourceError(
                    f"{self.label}: the compressed data ends early or is damaged after line {after} "
                    f"({msg}){_compression_note(self.path)}; the file was cut short (an interrupted download or "
                    "copy): download or copy it again"
                )
            return SourceError(
                f"{self.label}: malformed CSV after about line {after}: {msg}{_compression_note(self.path)}; fix "
                "or re-download it"
            )
        value = m.group(2)
        names = read.column_names or self._first_line()
        col = names[int(m.group(1))] if int(m.group(1)) < len(names) else f"#{m.group(1)}"
        if "\ufffd" in value:  # pyarrow shows bytes that are not UTF-8 as U+FFFD
            return self._utf8_error()
        try:
            row = self._find_bad_row(col, source, read, parse)
        except pa.ArrowInvalid as e2:
            if "UTF8" in str(e2):
                return self._utf8_error()
            raise
        return SourceError(
            f"{self.where(col, row)}: value {value!r} is not a number (wrong dtype: the column must be numeric); "
            "fix the file or check that it is the right one"
        )

    def _readable_lines(self) -> int:
        """Complete lines before a damaged or cut-short compressed stream ends (error path only)."""
        n = 0
        try:
            with _open_binary(self.path) as f:
                for line in f:
                    if line.endswith(b"\n"):
                        n += 1
        except (OSError, EOFError, zlib.error):
            pass
        return n

    def _utf8_error(self) -> SourceError:
        """Find the first line with bytes that are not UTF-8 (error path only)."""
        try:
            with _open_binary(self.path) as f:
                for no, raw in enumerate(f, start=1):
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError as u:
                        fields = raw[: u.start].count(b",")
                        names = self.names if self.line_offset == 0 or no == 1 else self._first_line()
                        col = names[fields] if fields < len(names) else f"#{fields + 1}"
                        return SourceError(
                            f"{self.label} line {no}: column {col!r}: byte {raw[u.start:u.start + 1]!r} is not "
                            "UTF-8 text; fix the value or save the file as UTF-8 CSV"
                        )
        except (OSError, EOFError, zlib.error):
            pass
        return SourceError(f"{self.label}: the file holds bytes that are not UTF-8 text; save it as UTF-8 CSV")

    def _find_bad_row(
        self, col: str, source: Any, read: pacsv.ReadOptions, parse: pacsv.ParseOptions
    ) -> int | None:
        """Second pass over one column as text (error path only): the first value that is not a number."""
        opts = pacsv.ConvertOptions(
            column_types={col: pa.string()},
            include_columns=[col],
            null_values=_NULLS,
            strings_can_be_null=True,
        )
        rows = 0
        for batch in pacsv.open_csv(source(), read_options=read, parse_options=parse, convert_options=opts):
            for i, v in enumerate(batch.column(0).to_pylist()):
                if v is None:
                    continue
                try:
                    float(v)
                except ValueError:
                    return rows + i
            rows += batch.num_rows
        return None

    # -- arff
    def _arff(self) -> Iterator[pa.RecordBatch]:
        names: list[str] = []
        line_no = 0
        with _open_binary(self.path) as f:
            while True:
                raw = f.readline()
                if not raw:
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
            data_start = f.tell()
        self.check_columns(names, header="ARFF header")
        self.line_offset = line_no
        read = pacsv.ReadOptions(block_size=BLOCK_BYTES, column_names=names)
        parse = pacsv.ParseOptions(quote_char="'", ignore_empty_lines=True)

        def source() -> IO[bytes]:
            fh = _open_binary(self.path)
            fh.seek(data_start)
            return fh

        with source() as head:
            first = head.read(256).lstrip()
        if first.startswith(b"{"):
            raise SourceError(f"{self.path}: sparse ARFF is not supported; convert it to CSV or Parquet")
        yield from self._csv_stream(source, read, parse)


def _numeric(arr: pa.Array, reader: _Reader, name: str, row0: int) -> pa.Array:
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
            for i, v in enumerate(arr.to_pylist()):
                try:
                    if v is not None:
                        float(v)
                except ValueError:
                    raise SourceError(
                        f"{reader.where(name, row0 + i)}: value {v!r} is not a number (wrong dtype: the column "
                        "must be numeric); fix the file or check that it is the right one"
                    ) from None
            raise
    raise SourceError(
        f"{reader.where(name)}: has type {arr.type}, expected a number (wrong dtype); fix the file or check "
        "that it is the right one"
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text.strip() in _NULLS
    return True


def _first(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _convert_batch(
    batch: pa.RecordBatch, reader: _Reader, row0: int, allowed: dict[str, tuple[float, ...]]
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
    reader: _Reader,
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
        too_big = pc.fill_null(pc.greater(pc.abs(f64), _FLOAT32_MAX), False)
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
        return pc.cast(arr, pa.int64())
    f64 = pc.cast(arr, pa.float64())
    bad = pc.or_(pc.not_equal(f64, pc.floor(f64)), pc.greater_equal(pc.abs(f64), _MAX_EXACT_INT))
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


def read_raw_table(path: str | Path, schema: DatasetSchema, file_key: str, label: str | None = None) -> pa.Table:
    """`read_raw_file` as an Arrow table (no pandas copy): what `acquire_*` write to Parquet. `label` names the
    file in messages (default: its path; an archive member: `archive.zip:train.csv`)."""
    path = Path(path)
    label = label or str(path)
    if file_key not in schema.raw_files:
        raise ValueError(f"{schema.name} has no raw file {file_key!r}; raw files: {list(schema.raw_files)}")
    if not path.is_file():
        raise SourceError(f"{label}: no such file; check the path in params.yaml")
    if path.stat().st_size == 0:
        raise SourceError(
            f"{label}: the file is empty (0 bytes); expected the columns {[c.name for c in schema.raw_columns]}"
        )
    reader = _Reader(path, schema, file_key, label)
    allowed = _allowed_values(schema)
    out: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader.batches():
        out.append(_convert_batch(batch, reader, rows, allowed))
        rows += batch.num_rows
    if rows == 0:
        raise SourceError(f"{label}: no data rows (header only); the file is empty or was cut short")
    target = pa.schema(
        [(c.name, pa.float32() if c.dtype == "float" else pa.int64()) for c in schema.raw_columns]
    )
    table = pa.Table.from_batches(out, schema=target)
    n_nan = {
        c.name: table.column(c.name).null_count + int(pc.sum(pc.is_nan(table.column(c.name))).as_py() or 0)
        for c in schema.raw_columns
        if c.dtype == "float" and c.role != "label"
    }
    n_nan = {k: v for k, v in n_nan.items() if v}
    if n_nan:
        log.warning("%s: missing values in feature columns (kept as NaN): %s", path, n_nan)
    log.info("%s: read %d rows x %d columns", path, rows, len(schema.raw_columns))
    return table


def read_raw_file(path: str | Path, schema: DatasetSchema, file_key: str) -> pd.DataFrame:
    """Read one raw file into the schema's raw columns, in schema order (float32 / int64), strictly checked:
    missing column, non-numeric value, empty file, header only, NaN in a label, a label outside its classes
    each raise `SourceError`. Extra columns are ignored (logged)."""
    return read_raw_table(path, schema, file_key).to_pandas()


# --------------------------------------------------------------------------------------------------
# Locating the raw files: a file, a folder, or an archive


def _candidates(key: str) -> set[str]:
    return {f"{key}{s}" for s in _DATA_SUFFIXES}


def _is_archive(path: Path) -> bool:
    return path.name.lower().endswith(_ARCHIVE_SUFFIXES)


def _locate_in_folder(folder: Path, schema: DatasetSchema, where: str) -> dict[str, Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    found: dict[str, Path] = {}
    for key in schema.raw_files:
        hits = [p for p in files if p.name.lower() in _candidates(key)]
        if not hits and len(schema.raw_files) == 1:
            hits = [p for p in files if p.name.lower().endswith(_DATA_SUFFIXES)]
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)} ({[p.name for p in hits]})"
            listing = [p.name for p in files][:30]
            raise SourceError(
                f"{folder}: found {what} file(s) for {schema.name!r} raw file {key!r}; expected exactly one of "
                f"{sorted(_candidates(key))} ({where}). The folder holds {len(files)} file(s): "
                f"{listing}{' ...' if len(files) > 30 else ''}; rename or move the file, or point the path at it"
            )
        found[key] = hits[0]
    return found


_ARCHIVE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, EOFError, zlib.error, OSError)


def _extract(archive: Path, schema: DatasetSchema, dest_dir: Path) -> dict[str, tuple[Path, str]]:
    """Extract the member for each raw file (e.g. AliExpress_NL/train.csv) into `dest_dir`; members already
    there with the right size are reused. Returns raw file -> (extracted path, `archive:member` label).
    A damaged archive (cut short, bad CRC, bad compressed data) raises SourceError naming archive and member."""
    is_zip = archive.name.lower().endswith(".zip")
    what = "zip" if is_zip else "tar"
    try:
        if is_zip:
            with zipfile.ZipFile(archive) as z:
                members = {i.filename: i.file_size for i in z.infolist() if not i.is_dir()}
                return _extract_members(archive, schema, dest_dir, members, lambda m: z.open(m))
        with tarfile.open(archive, "r:*") as t:
            tar_members = {m.name: m for m in t.getmembers() if m.isfile()}

            def open_member(m: str) -> IO[bytes]:
                f = t.extractfile(tar_members[m])
                assert f is not None  # regular files only
                return f

            sizes = {n: m.size for n, m in tar_members.items()}
            return _extract_members(archive, schema, dest_dir, sizes, open_member)
    except _MemberError as e:
        raise SourceError(
            f"{archive}:{e.member}: the archive member is damaged ({e.cause}); the archive was cut short or "
            "corrupted (an interrupted download or copy): download or copy it again"
        ) from e.cause
    except _ARCHIVE_ERRORS as e:
        raise SourceError(
            f"{archive}: not a readable {what} archive ({type(e).__name__}: {e}); it is cut short or damaged (an "
            "interrupted download or copy): download or copy it again"
        ) from e


class _MemberError(Exception):
    def __init__(self, member: str, cause: BaseException) -> None:
        super().__init__(member)
        self.member = member
        self.cause = cause


def _extract_members(
    archive: Path, schema: DatasetSchema, dest_dir: Path, members: dict[str, int], open_member: Any
) -> dict[str, tuple[Path, str]]:
    usable = {m: s for m, s in members.items() if "__MACOSX" not in m and not Path(m).name.startswith("._")}
    found: dict[str, tuple[Path, str]] = {}
    for key in schema.raw_files:
        hits = sorted(m for m in usable if Path(m).name.lower() in _candidates(key))
        if len(hits) != 1:
            listing = sorted(usable)[:20]
            raise SourceError(
                f"{archive}: found {len(hits)} member(s) for {schema.name!r} raw file {key!r} "
                f"({hits or 'none'}); expected exactly one named like {sorted(_candidates(key))}. "
                f"Members: {listing}{' ...' if len(usable) > 20 else ''}"
            )
        member = hits[0]
        out = dest_dir / Path(member).name
        if not (out.exists() and out.stat().st_size == usable[member]):
            log.info("%s: extracting %s -> %s", archive, member, out)
            try:
                with atomic_path(out) as tmp, open_member(member) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 16 << 20)
            except _ARCHIVE_ERRORS as e:
                raise _MemberError(member, e) from e
        found[key] = (out, f"{archive}:{member}")
    return found


# --------------------------------------------------------------------------------------------------
# Acquisition


def _write_all(
    schema: DatasetSchema,
    files: dict[str, Path],
    out_dir: Path,
    refs: dict[str, dict[str, Any]],
    labels: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Convert each raw file into out_dir/<key>.parquet; on any failure remove what this call wrote."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    info: dict[str, dict[str, Any]] = {}
    try:
        for key in schema.raw_files:
            table = read_raw_table(files[key], schema, key, (labels or {}).get(key))
            target = out_dir / f"{key}.parquet"
            with atomic_path(target) as tmp:
                pq.write_table(table, tmp)
            written.append(target)
            rows = table.num_rows
            _check_dropped_constant(schema, table, (labels or {}).get(key) or str(files[key]))
            del table
            info[key] = {"rows": rows, **refs[key]}
            expected = schema.real_rows.get(key)
            if expected is not None and rows != expected:
                log.warning(
                    "%s/%s: %d rows, the published figure is %d; check that the file is complete and the right "
                    "one",
                    schema.name,
                    key,
                    rows,
                    expected,
                )
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return info


def _check_dropped_constant(schema: DatasetSchema, table: pa.Table, label: str) -> None:
    """The columns the study drops as constant (AliExpress' categorical_1, numerical_58..60) should be: if one
    varies, the file may not be the published release (or the columns are shifted), so say so."""
    for c in schema.raw_columns:
        if c.role != "drop" or c.name.endswith("_id") or table.num_rows == 0:
            continue
        mm = pc.min_max(table.column(c.name)).as_py()
        if mm["min"] != mm["max"]:
            log.warning(
                "%s: column %r varies (%s .. %s) but is constant in the %s release (the study drops it); check that "
                "the columns are the release's",
                label, c.name, mm["min"], mm["max"], schema.name,
            )


def acquire_local(schema: DatasetSchema, cfg: LocalConfig, out_dir: str | Path) -> dict[str, Any]:
    """Files the user already has: `cfg.path` is a file (one raw file), a folder holding `<key>.csv`,
    `<key>.csv.gz` or `<key>.parquet` per raw file (AliExpress: train, test), or a .zip / .tar.gz of them."""
    where = f"datasets.{schema.name}.local.path in params.yaml"
    if cfg.path is None:
        raise SourceError(
            f"{schema.name}: source is 'local' but {where} is not set; set it to your file "
            f"({'a folder with ' + ' and '.join(schema.raw_files) + ' files' if len(schema.raw_files) > 1 else 'CSV, CSV.gz or Parquet'})"
        )
    root = Path(cfg.path)
    if not root.exists():
        raise SourceError(
            f"{root}: no such file or folder ({where}); check the path (relative to the repo root)"
        )
    out_dir = Path(out_dir)
    labels: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if root.is_dir():
            files = _locate_in_folder(root, schema, where)
        elif _is_archive(root):
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix=".extract.", dir=out_dir.parent))
            )
            extracted = _extract(root, schema, tmp)
            files = {k: p for k, (p, _) in extracted.items()}
            labels = {k: lab for k, (_, lab) in extracted.items()}
        elif len(schema.raw_files) == 1:
            files = {schema.raw_files[0]: root}
        else:
            raise SourceError(
                f"{root}: {schema.name} needs the files {list(schema.raw_files)}: point {where} at a folder (or "
                ".zip / .tar.gz) holding them"
            )
        source_sha = sha256_file(root) if root.is_file() else None
        refs = {
            k: {"sha256": source_sha or sha256_file(p), "path": str(root if root.is_file() else p)}
            for k, p in files.items()
        }
        if root.is_file() and _is_archive(root):
            refs = {k: {**r, "member": files[k].name} for k, r in refs.items()}
        return {"source": "local", "standin": False, "files": _write_all(schema, files, out_dir, refs, labels)}


def _is_url(value: str) -> bool:
    return urlparse(value).scheme in {"http", "https"}


def _cache_name(url: str, fmt: str) -> str:
    name = Path(unquote(urlparse(url).path)).name or "download"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    suffix = _FORMAT_SUFFIX[fmt]
    aliases = {".parquet": (".parquet", ".pq"), ".tar.gz": (".tar.gz", ".tgz")}.get(suffix, (suffix,))
    return name if name.lower().endswith(aliases) else name + suffix


def acquire_remote(
    schema: DatasetSchema, cfg: RemoteConfig, out_dir: str | Path, cache_dir: str | Path
) -> dict[str, Any]:
    """The real files: download `cfg.url` into `cache_dir/<dataset>/` (verified against `cfg.sha256`,
    resumable, reused on a re-run) or take a local archive path, then convert as `acquire_local` does.
    `cfg.format` says what the file is: csv / csv.gz / parquet / arff (one raw file) or zip / tar.gz (an
    archive holding `<key>.csv` etc. per raw file, e.g. AliExpress_NL/train.csv and test.csv)."""
    where = f"datasets.{schema.name}.remote"
    if cfg.url is None:
        hint = (
            "its host needs a login: download AliExpress_NL (train.csv, test.csv) yourself and set "
            f"{where}.url to the archive's path or URL, or use source: local"
            if len(schema.raw_files) > 1
            else f"set {where}.url in params.yaml"
        )
        raise SourceError(f"{schema.name}: source is 'remote' but {where}.url is not set; {hint}")
    is_archive = cfg.format in ("zip", "tar.gz")
    if not is_archive and len(schema.raw_files) > 1:
        raise SourceError(
            f"{where}.format={cfg.format!r} gives one file but {schema.name} needs {list(schema.raw_files)}: "
            "use format zip or tar.gz (an archive holding them)"
        )
    cache = Path(cache_dir) / schema.name
    if _is_url(cfg.url):
        src = fetch(
            cfg.url,
            cache / _cache_name(cfg.url, cfg.format),
            sha256=cfg.sha256,
            retries=cfg.retries,
            backoff_seconds=cfg.backoff_seconds,
            timeout_seconds=cfg.timeout_seconds,
        )
        digest = cfg.sha256.lower() if cfg.sha256 else sha256_file(src)
    else:
        parsed = urlparse(cfg.url)
        if parsed.scheme not in ("", "file"):
            raise SourceError(f"{where}.url={cfg.url!r}: only http(s) URLs or local paths are supported")
        src = Path(unquote(parsed.path) if parsed.scheme == "file" else cfg.url)
        if not src.is_file():
            raise SourceError(
                f"{src}: no such file ({where}.url); check the path (relative to the repo root)"
            )
        digest = sha256_file(src)
        if cfg.sha256 and digest != cfg.sha256.lower():
            raise SourceError(
                f"{src}: sha256 {digest} does not match {where}.sha256={cfg.sha256}; the file is damaged or a "
                "different version: fetch it again, or update the checksum if you trust this file"
            )
    if not cfg.sha256:
        log.warning(
            "%s: no checksum configured; this file has sha256 %s: pin it as %s.sha256 in params.yaml",
            src,
            digest,
            where,
        )
    labels: dict[str, str] = {}
    if is_archive:
        extracted = _extract(src, schema, cache / f"{src.name}.{digest[:12]}")
        files = {k: p for k, (p, _) in extracted.items()}
        labels = {k: lab for k, (_, lab) in extracted.items()}
        refs = {k: {"sha256": digest, "url": cfg.url, "member": p.name} for k, p in files.items()}
    else:
        files = {schema.raw_files[0]: _as_kind(src, cfg.format)}
        refs = {schema.raw_files[0]: {"sha256": digest, "url": cfg.url}}
    return {
        "source": "remote",
        "standin": False,
        "files": _write_all(schema, files, Path(out_dir), refs, labels),
    }


def _as_kind(src: Path, fmt: str) -> Path:
    """`src` itself, checked to be named for its format (the reader picks the parser by the name)."""
    name = src.name.lower()
    suffix = _FORMAT_SUFFIX[fmt]
    if name.endswith(suffix) or (fmt == "parquet" and name.endswith(".pq")):
        return src
    raise SourceError(
        f"{src}: remote.format is {fmt!r} but the file name does not end in {suffix}; rename it"
    )


__all__ = [
    "SourceError",
    "acquire_local",
    "acquire_remote",
    "read_raw_file",
    "read_raw_table",
]
