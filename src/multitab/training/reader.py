"""A processed split (Parquet) read into its four tensors without holding the data twice.

The tensors (numerical features float32, categorical codes int64, float targets float32, class targets
int64; training/data.py's TensorSplit) are allocated once, at their final size and in their final place:
host memory, or on CUDA the GPU when the split fits there (`gpu_has_room`), else pinned host memory. They
are then filled one row group at a time, a few columns at a time, straight from Parquet's decoded column
buffers, while the next columns are decoded in a second thread. What the reader holds besides the tensors
is at most twice `_GROUP_BYTES` of decoded columns: no Arrow table or pandas frame of the split, no float64
column, no stacked copy, and nothing to copy on the way to torch (the host tensors are written through
their numpy views). On CUDA each column of a row group is copied to the GPU as it is read, so the host
never holds the split at all.

The values are those the previous loader gave (whole table -> numpy columns -> stacked arrays, kept as
`training.data.split_from_frame_arrays`): numpy's casts to the tensor's dtype, bit for bit
(tests/test_training_data.py). They are checked as they are written: a non-finite number, a missing value
or a code outside its range names the file, column and row. `max_rows` reads only the first rows
(`train.max_train_rows`): the rest of the file is not decoded.
"""

from __future__ import annotations

import logging
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from multitab.datasets.schema import DatasetSchema

log = logging.getLogger(__name__)

# Decoded bytes of one row group read at once (columns are read in groups below this size): bounds the
# reader's own memory whatever the file's row groups are. Rows are written to the tensors in blocks of
# _BLOCK_ROWS across a group's columns: one column at a time over the whole split writes every cache line
# of a row once per column (measured 8x slower).
_GROUP_BYTES = 64 << 20
_BLOCK_ROWS = 1 << 14


class DataError(ValueError):
    """Processed data that does not match its meta.json."""


def gpu_has_room(nbytes: int, device: torch.device, max_fraction: float = 0.5) -> bool:
    """Whether `nbytes` take at most `max_fraction` of the free memory of CUDA `device`."""
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= max_fraction * free


def _integer(field_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(field_type))


def _number(field_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(field_type) or pa.types.is_floating(field_type) or pa.types.is_boolean(field_type))


class _Column:
    """Where one Parquet column goes: tensor `key`, column `j`, and its check."""

    def __init__(self, name: str, key: str, j: int, kind: str, high: int | None = None) -> None:
        self.name, self.key, self.j, self.kind, self.high = name, key, j, kind, high

    def check(self, values: np.ndarray, offset: int, where: str) -> None:
        """`values` (rows `offset`..., already in the tensor's dtype) as today's loader checks them."""
        if self.kind in ("num", "float_task"):
            finite = np.isfinite(values)
            if not finite.all():
                row = offset + int(np.argmin(finite))
                what = "column" if self.kind == "num" else "task column"
                raise DataError(f"{where}: {what} {self.name!r} row {row}: non-finite value; "
                                "re-run preprocess/validation")
            return
        if self.high is None:
            return
        bad = np.nonzero((values < 0) | (values >= self.high))[0]
        if bad.size:
            row, value = offset + int(bad[0]), int(values[bad[0]])
            if self.kind == "cat":
                raise DataError(f"{where}: column {self.name!r} row {row}: code {value} outside [0, {self.high}) given "
                                "by meta.json; re-run preprocess")
            raise DataError(f"{where}: task {self.name!r} row {row}: class {value} outside [0, {self.high})")


def _layout(schema: DatasetSchema) -> tuple[list[_Column], dict[str, tuple[int, torch.dtype]]]:
    """Every column's destination, and each tensor's width and dtype."""
    cols: list[_Column] = []
    num = [f for f in schema.features if f.kind == "numerical"]
    cat = [f for f in schema.features if f.kind == "categorical"]
    float_tasks = [t for t in schema.tasks if t.type != "multiclass"]
    long_tasks = [t for t in schema.tasks if t.type == "multiclass"]
    cols += [_Column(f.name, "x_num", j, "num") for j, f in enumerate(num)]
    cols += [_Column(f.name, "x_cat", j, "cat", f.cardinality) for j, f in enumerate(cat)]
    cols += [_Column(t.name, "y_float", j, "float_task") for j, t in enumerate(float_tasks)]
    cols += [_Column(t.name, "y_long", j, "long_task", t.n_classes or 0) for j, t in enumerate(long_tasks)]
    widths = {"x_num": (len(num), torch.float32), "x_cat": (len(cat), torch.int64),
              "y_float": (len(float_tasks), torch.float32), "y_long": (len(long_tasks), torch.int64)}
    return cols, widths


def _check_columns(pf: pq.ParquetFile, schema: DatasetSchema, cols: list[_Column], where: str) -> None:
    arrow = pf.schema_arrow
    for name in schema.canonical_columns:
        if arrow.get_field_index(name) < 0:
            raise DataError(f"{where}: column {name!r} missing (expected {schema.canonical_columns}); "
                            "re-run preprocess")
    for c in cols:
        field_type = arrow.field(c.name).type
        if c.kind in ("cat", "long_task") and not _integer(field_type):
            what = "categorical column" if c.kind == "cat" else "task column"
            raise DataError(f"{where}: {what} {c.name!r} has dtype {field_type}, expected integer codes")
        if not _number(field_type):
            raise DataError(f"{where}: column {c.name!r} has dtype {field_type}, expected numbers")


def read_split(
    file: str | Path, schema: DatasetSchema, *, device: torch.device | None = None, max_rows: int | None = None,
) -> tuple[dict[str, torch.Tensor], int]:
    """The tensors x_num, x_cat, y_float, y_long of one processed split (the first `max_rows` rows when
    given), on `device` (default CPU; CUDA: the GPU when they fit, else pinned host memory), and the
    file's row count."""
    where = str(file)
    pf = pq.ParquetFile(file)
    cols, widths = _layout(schema)
    _check_columns(pf, schema, cols, where)
    n_file = pf.metadata.num_rows
    n = n_file if max_rows is None else min(n_file, max_rows)
    device = torch.device("cpu") if device is None else device
    nbytes = sum(n * w * dt.itemsize for w, dt in widths.values())
    on_gpu = device.type == "cuda" and gpu_has_room(nbytes, device)
    pin = device.type == "cuda" and not on_gpu
    if pin:
        log.info("%s: %.1f GB do not fit on the GPU: pinned host memory", where, nbytes / 1e9)
    target = device if on_gpu else torch.device("cpu")
    tensors = {k: torch.empty((n, w), dtype=dt, device=target, pin_memory=pin) for k, (w, dt) in widths.items()}
    host = None if on_gpu else {k: t.numpy() for k, t in tensors.items()}
    # what to read: (row group, its first row, rows wanted, a group of columns below _GROUP_BYTES decoded)
    reads: list[tuple[int, int, int, list[_Column]]] = []
    offset = 0
    for i in range(pf.num_row_groups):
        if offset >= n:
            break
        group_rows = pf.metadata.row_group(i).num_rows
        rows = min(group_rows, n - offset)
        per_read = max(1, _GROUP_BYTES // max(8 * group_rows, 1))
        reads += [(i, offset, rows, cols[g : g + per_read]) for g in range(0, len(cols), per_read)]
        offset += rows

    def fetch(k: int) -> pa.Table:
        i, _, _, group = reads[k]
        return pf.read_row_group(i, columns=[c.name for c in group])

    # Parquet decodes the next columns (in Arrow's threads, without the GIL) while these are written
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="multitab-parquet") as pool:
        ahead = pool.submit(fetch, 0) if reads else None
        for k, (_, offset, rows, group) in enumerate(reads):
            assert ahead is not None
            table = ahead.result()
            ahead = pool.submit(fetch, k + 1) if k + 1 < len(reads) else None
            # the columns as numpy views of Arrow's buffers (a copy only where the dtype changes)
            columns = [table.column(j) for j in range(len(group))]
            if any(c.num_chunks != 1 for c in columns):
                columns = [c.combine_chunks() for c in columns]
            else:
                columns = [c.chunk(0) for c in columns]
            values = [_values(c, col.slice(0, rows), tensors[c.key].dtype, offset, where)
                      for c, col in zip(group, columns)]
            _write(tensors, host, group, values, offset, rows)
            del table, columns, values
    return tensors, n_file


def _values(c: _Column, chunk: pa.Array, dtype: torch.dtype, offset: int, where: str) -> np.ndarray:
    """One column chunk (rows offset...) in the tensor's dtype, checked."""
    if chunk.null_count:
        row = offset + int(np.argmax(chunk.is_null().to_numpy(zero_copy_only=False)))
        raise DataError(f"{where}: column {c.name!r} row {row}: missing value; re-run preprocess")
    values = chunk.to_numpy(zero_copy_only=False).astype(np.float32 if dtype == torch.float32 else np.int64, copy=False)
    c.check(values, offset, where)
    return values


def _write(tensors: dict[str, torch.Tensor], host: dict[str, np.ndarray] | None, group: list[_Column],
           values: list[np.ndarray], offset: int, rows: int) -> None:
    """Columns `values` of `group` into rows offset..offset+rows of their tensors: on the GPU one copy per
    column, on the host in blocks of rows."""
    if host is None:
        with warnings.catch_warnings():
            # Arrow's buffers are read-only; torch warns for any read-only array, though it only reads it here
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            for c, v in zip(group, values):
                tensors[c.key][offset : offset + rows, c.j].copy_(torch.from_numpy(v))
        return
    for start in range(0, rows, _BLOCK_ROWS):
        stop = min(start + _BLOCK_ROWS, rows)
        for c, v in zip(group, values):
            host[c.key][offset + start : offset + stop, c.j] = v[start:stop]
