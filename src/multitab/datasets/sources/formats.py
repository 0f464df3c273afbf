"""Raw file formats of the `local` / `remote` sources: which format a file is, how to open it, the
SourceError every reader raises, and the diagnostics of a CSV that pyarrow cannot parse (the line, the
column count, the encoding)."""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.csv as pacsv

from multitab.datasets.schema import DatasetSchema

BLOCK_BYTES = 64 << 20  # CSV block per batch: few batches for 11 M rows, bounded memory per batch
PARQUET_BATCH_ROWS = 1_000_000
NULLS = ["", "?", "NA", "N/A", "NaN", "nan", "-nan", "NULL", "null", "None"]
DATA_SUFFIXES = (".parquet", ".pq", ".csv.gz", ".csv", ".arff.gz", ".arff")
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")
FORMAT_SUFFIX = {
    "csv": ".csv",
    "csv.gz": ".csv.gz",
    "parquet": ".parquet",
    "arff": ".arff",
    "zip": ".zip",
    "tar.gz": ".tar.gz",
}
MAX_EXACT_INT = 2**53  # integers stored as float64 are exact below this
FLOAT32_MAX = 3.4028234663852886e38
_GZIP_MAGIC = b"\x1f\x8b"
# What reading a damaged file raises (compressed stream cut short, bad bytes): turned into SourceError.
READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowInvalid, UnicodeDecodeError)


class SourceError(ValueError):
    """Real input data that cannot be used as it is (the message names file, column, row, and the fix)."""


def file_kind(path: Path, label: str | None = None) -> str:
    name = path.name.lower()
    for suffix, kind in ((".parquet", "parquet"), (".pq", "parquet"), (".csv.gz", "csv"), (".csv", "csv")):
        if name.endswith(suffix):
            if kind == "csv" and path.is_file():
                check_content(path, label)
            return kind
    if name.endswith((".arff", ".arff.gz")):
        if path.is_file():
            check_content(path, label)
        return "arff"
    raise SourceError(
        f"{label or path}: unsupported file type; use CSV (.csv), gzipped CSV (.csv.gz), Parquet (.parquet/.pq) "
        "or ARFF (.arff)"
    )


# Compressions other than gzip, by their magic bytes: read by none of the readers (a .csv.gz that is xz).
_OTHER_COMPRESSION = {b"\xfd7zXZ\x00": ("xz", "xz -d"), b"BZh": ("bzip2", "bunzip2"),
                      b"\x28\xb5\x2f\xfd": ("zstd", "zstd -d"), b"7z\xbc\xaf\x27\x1c": ("7-Zip", "7z x")}
# Other files that are not text, by their first bytes: what each is, and what to do (a zip renamed .csv).
_EXCEL = ("an Office file (an Excel workbook?)", "save it as CSV (UTF-8) from the spreadsheet program")
_NOT_TEXT = {b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1": _EXCEL,  # .xls (.xlsx: a zip, below)
             b"PK\x03\x04": ("a zip archive", "unzip it and point the path at the CSV inside"),
             b"PAR1": ("a Parquet file", "name it .parquet"),
             b"\xff\xfe": ("UTF-16 text", "save it as UTF-8 CSV"), b"\xfe\xff": ("UTF-16 text", "save it as UTF-8 CSV")}


def check_content(path: Path, label: str | None = None) -> None:
    """SourceError when the file's first bytes say it is not (gzipped) text a CSV reader can read, whatever its
    name says: compressed with something other than gzip (naming the compression and how to undo it), a zip
    archive, an Excel workbook or a Parquet file, or UTF-16 text. A gzip stream is looked into."""
    with open_binary(path) as f:
        try:
            head = f.read(64)
        except (OSError, EOFError, zlib.error):  # a damaged gzip stream: its reader names the damage
            return
    for magic, (name, undo) in _OTHER_COMPRESSION.items():
        if head.startswith(magic):
            raise SourceError(f"{label or path}: the file is {name}-compressed (its first bytes say so), which is "
                              f"not read here; decompress it (`{undo}`) and use the CSV, or gzip it")
    office = head.startswith(b"PK\x03\x04") and b"[Content_Types].xml" in head  # .xlsx: a zip, this first
    found = _EXCEL if office else next((v for magic, v in _NOT_TEXT.items() if head.startswith(magic)), None)
    if found is not None:
        raise SourceError(f"{label or path}: the file is {found[0]} (its first bytes say so), not CSV text; {found[1]}")


def _is_gzip(path: Path) -> bool:
    """Whether the file's bytes are gzip (sniffed: a gzip named .csv, or a plain file named .csv.gz, happen)."""
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def open_binary(path: Path) -> IO[bytes]:
    if _is_gzip(path):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


_LINE_END = re.compile(rb"\r\n|\r|\n")


def iter_lines(f: IO[bytes], *, partial: bool = True, block: int = 1 << 16) -> Iterator[tuple[bytes, int]]:
    """The lines of a byte stream without their ends, each with the stream offset just past its end. A line
    ends in \\n, \\r\\n or \\r alone (old Mac files, which pyarrow's CSV reader reads too; `readline` would
    return the whole file as one line). Read in blocks: finding line 1 never reads the file whole.
    partial: also yield a last line that no line end closes."""
    # read1: what the stream has at hand (a gzip stream cut short still gives the lines before the cut)
    read = getattr(f, "read1", f.read)
    buf, pos = b"", 0  # pos: the stream offset of buf[0]
    while True:
        data = read(block)
        buf += data
        start = 0
        for m in _LINE_END.finditer(buf):
            if data and m.end() == len(buf) and m.group() == b"\r":
                break  # a \r\n may straddle two blocks: decide with the next one
            yield buf[start : m.start()], pos + m.end()
            start = m.end()
        buf, pos = buf[start:], pos + start
        if not data:
            if buf and partial:
                yield buf, pos + len(buf)
            return


def arrow_stream(path: Path) -> pa.NativeFile:
    """The file's bytes for pyarrow's CSV reader, decompressed by what the bytes are, not by the name."""
    return pa.input_stream(str(path), compression="gzip" if _is_gzip(path) else None)


def compression_note(path: Path) -> str:
    gz = _is_gzip(path)
    named = path.name.lower().endswith(".gz")
    if gz and not named:
        return " (the file is gzip-compressed although its name does not end in .gz: it was read as gzip)"
    if named and not gz:
        return " (the file is named .gz but is not gzip-compressed: it was read as plain text)"
    return ""


def allowed_values(schema: DatasetSchema) -> dict[str, tuple[float, ...]]:
    """Raw label column -> the values its tasks accept (derived from the schema's Task objects)."""
    allowed: dict[str, tuple[float, ...]] = {}
    for t in schema.tasks:
        if t.type == "binary" and t.threshold is None:
            allowed[t.column] = (0.0, 1.0)
        elif t.type == "multiclass":
            codes = t.codes if t.codes is not None else tuple(range(t.n_classes or 0))
            allowed[t.column] = tuple(float(c) for c in codes)
    return allowed


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text.strip() in NULLS
    return True



class CsvDiagnostics:
    """What went wrong in a CSV file pyarrow could not parse (mixed into readers.FileReader)."""

    path: Path
    label: str
    names: list[str]
    line_offset: int | None
    delimiter: str

    def where(self, column: str, row: int | None = None) -> str:
        raise NotImplementedError

    def _first_line(self) -> list[str]:
        raise NotImplementedError

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
                    f"({msg}){compression_note(self.path)}; the file was cut short (an interrupted download or "
                    "copy): download or copy it again"
                )
            return SourceError(
                f"{self.label}: malformed CSV after about line {after}: {msg}{compression_note(self.path)}; fix "
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
            with open_binary(self.path) as f:
                for _ in iter_lines(f, partial=False):
                    n += 1
        except (OSError, EOFError, zlib.error):
            pass
        return n

    def _utf8_error(self) -> SourceError:
        """Find the first line with bytes that are not UTF-8 (error path only)."""
        try:
            with open_binary(self.path) as f:
                for no, (raw, _) in enumerate(iter_lines(f), start=1):
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError as u:
                        fields = raw[: u.start].count(self.delimiter.encode())
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
            null_values=NULLS,
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
