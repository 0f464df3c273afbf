"""The data path: processed Parquet loaded once into tensors, batches sliced from index permutations.

No per-sample Python and no DataLoader: each split is held as three tensors (numerical features,
categorical codes, and the targets stacked by dtype), and a batch is one `index_select` per tensor with a
slice of a shuffled permutation. On CUDA the whole split lives on the GPU when it fits (`place`), so a
batch never crosses the bus; otherwise it stays in pinned host memory and each batch is copied
asynchronously. `load_processed` reads each split straight into its tensors, in their place
(training/reader.py: the split is never held twice, on the host or on the way to the GPU).

Batch composition. With batch size 2048 (the paper's), models with inter-sample attention (SAINT,
MultiTab-Net with true inter-sample attention) see the other samples of the batch, so batch composition
is part of the model: training batches come from a seeded permutation (its generator state is
checkpointed), and evaluation uses the split's stored order, sliced into consecutive batches of the same
size, never shuffled, so test predictions are reproducible.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.training.reader import DataError, gpu_has_room, read_split

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")

__all__ = ["SPLITS", "Batch", "DataError", "ProcessedData", "TensorSplit", "iterate_batches", "load_processed", "place",
           "split_from_frame_arrays"]


@dataclass
class TensorSplit:
    """One split as tensors. Targets are stacked by dtype: `y_float` (binary as 0./1., regression)
    and `y_long` (multiclass); `targets` maps each task to its column view."""

    x_num: torch.Tensor  # (n, n_num) float32
    x_cat: torch.Tensor  # (n, n_cat) int64
    y_float: torch.Tensor  # (n, n_float_tasks) float32
    y_long: torch.Tensor  # (n, n_long_tasks) int64
    float_tasks: tuple[str, ...]
    long_tasks: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.x_num.shape[0])

    @property
    def device(self) -> torch.device:
        return self.x_num.device

    def targets(
        self, y_float: torch.Tensor | None = None, y_long: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        y_float = self.y_float if y_float is None else y_float
        y_long = self.y_long if y_long is None else y_long
        out = {t: y_float[:, i] for i, t in enumerate(self.float_tasks)}
        out.update({t: y_long[:, i] for i, t in enumerate(self.long_tasks)})
        return out

    def to(self, device: torch.device | str, *, pin: bool = False) -> TensorSplit:
        def move(t: torch.Tensor) -> torch.Tensor:
            if pin and t.device.type == "cpu":
                return t.pin_memory()
            return t.to(device)

        return TensorSplit(move(self.x_num), move(self.x_cat), move(self.y_float), move(self.y_long),
                           self.float_tasks, self.long_tasks)

    def head(self, n: int) -> TensorSplit:
        """The first `n` rows (views, no copy)."""
        return TensorSplit(self.x_num[:n], self.x_cat[:n], self.y_float[:n], self.y_long[:n],
                           self.float_tasks, self.long_tasks)

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (self.x_num, self.x_cat, self.y_float, self.y_long))


@dataclass
class Batch:
    x_num: torch.Tensor
    x_cat: torch.Tensor
    targets: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return int(self.x_num.shape[0])


@dataclass
class ProcessedData:
    """A processed dataset: its meta.json, the schema built from it, and the three splits."""

    meta: dict[str, Any]
    schema: DatasetSchema
    splits: dict[str, TensorSplit]
    path: Path


def split_from_frame_arrays(
    schema: DatasetSchema, columns: Mapping[str, np.ndarray], where: str
) -> TensorSplit:
    """Stack named column arrays into a TensorSplit, checking dtypes and values against the schema."""
    n = None
    for name in schema.canonical_columns:
        if name not in columns:
            raise DataError(f"{where}: column {name!r} missing (expected {schema.canonical_columns}); "
                            "re-run preprocess")
        size = len(columns[name])
        if n is None:
            n = size
        elif size != n:
            raise DataError(f"{where}: column {name!r} has {size} rows, expected {n}")
    n = n or 0
    num = [f.name for f in schema.features if f.kind == "numerical"]
    cat = [f for f in schema.features if f.kind == "categorical"]
    x_num = np.empty((n, len(num)), dtype=np.float32)
    for j, name in enumerate(num):
        x_num[:, j] = columns[name]
    if not np.isfinite(x_num).all():
        j = int(np.nonzero(~np.isfinite(x_num).all(axis=0))[0][0])
        row = int(np.nonzero(~np.isfinite(x_num[:, j]))[0][0])
        raise DataError(f"{where}: column {num[j]!r} row {row}: non-finite value; re-run preprocess/validation")
    x_cat = np.empty((n, len(cat)), dtype=np.int64)
    for j, f in enumerate(cat):
        col = np.asarray(columns[f.name])
        if not np.issubdtype(col.dtype, np.integer):
            raise DataError(f"{where}: categorical column {f.name!r} has dtype {col.dtype}, expected integer codes")
        x_cat[:, j] = col
        if n and f.cardinality is not None:
            bad = np.nonzero((col < 0) | (col >= f.cardinality))[0]
            if bad.size:
                raise DataError(f"{where}: column {f.name!r} row {int(bad[0])}: code {int(col[bad[0]])} outside "
                                f"[0, {f.cardinality}) given by meta.json; re-run preprocess")
    float_tasks = tuple(t.name for t in schema.tasks if t.type != "multiclass")
    long_tasks = tuple(t.name for t in schema.tasks if t.type == "multiclass")
    y_float = np.empty((n, len(float_tasks)), dtype=np.float32)
    for j, name in enumerate(float_tasks):
        y_float[:, j] = columns[name]
    if not np.isfinite(y_float).all():
        j = int(np.nonzero(~np.isfinite(y_float).all(axis=0))[0][0])
        raise DataError(f"{where}: task column {float_tasks[j]!r} holds non-finite values")
    y_long = np.empty((n, len(long_tasks)), dtype=np.int64)
    for j, name in enumerate(long_tasks):
        y_long[:, j] = columns[name]
        k = schema.task(name).n_classes
        bad = np.nonzero((y_long[:, j] < 0) | (y_long[:, j] >= (k or 0)))[0]
        if bad.size:
            raise DataError(f"{where}: task {name!r} row {int(bad[0])}: class {int(y_long[bad[0], j])} "
                            f"outside [0, {k})")
    return TensorSplit(torch.from_numpy(x_num), torch.from_numpy(x_cat), torch.from_numpy(y_float),
                       torch.from_numpy(y_long), float_tasks, long_tasks)


def load_processed(
    path: str | Path, splits: tuple[str, ...] = SPLITS, *, device: torch.device | None = None,
    max_rows: Mapping[str, int | None] | None = None,
) -> ProcessedData:
    """Read data/processed/<dataset> (or data/synthetic/<config>): meta.json and {split}.parquet, each split
    read into its tensors on `device` (default CPU; CUDA: on the GPU when it fits, else pinned host memory,
    as `place` decides), only the first `max_rows[split]` rows where given."""
    path = Path(path)
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise DataError(f"{meta_path}: not found; run the preprocess (or synthesize) stage first")
    meta = json.loads(meta_path.read_text())
    for key in ("features", "tasks"):
        if key not in meta:
            raise DataError(f"{meta_path}: key {key!r} missing")
    schema = schema_from_meta(meta)
    float_tasks = tuple(t.name for t in schema.tasks if t.type != "multiclass")
    long_tasks = tuple(t.name for t in schema.tasks if t.type == "multiclass")
    out = {}
    for split in splits:
        file = path / f"{split}.parquet"
        if not file.is_file():
            raise DataError(f"{file}: not found; re-run the stage that writes {path}")
        limit = (max_rows or {}).get(split)
        t, n_file = read_split(file, schema, device=device, max_rows=limit)
        out[split] = TensorSplit(t["x_num"], t["x_cat"], t["y_float"], t["y_long"], float_tasks, long_tasks)
        if len(out[split]) < n_file:
            log.info("%s: the first %d of %d rows", file, len(out[split]), n_file)
        else:
            log.info("%s: %d rows", file, n_file)
    return ProcessedData(meta=meta, schema=schema, splits=out, path=path)


def place(split: TensorSplit, device: torch.device, *, max_fraction: float = 0.5) -> TensorSplit:
    """Move a split to `device`. On CUDA: onto the GPU when it takes at most `max_fraction` of the free
    memory, else pinned host memory (batches are then copied one by one, asynchronously). A split already
    there (`load_processed` with the device) stays as it is."""
    if device.type != "cuda":
        return split.to(device)
    if split.device.type == "cuda" or split.x_num.is_pinned():
        return split
    if gpu_has_room(split.nbytes(), device, max_fraction):
        return split.to(device)
    free, _ = torch.cuda.mem_get_info(device)
    log.info("split of %.1f GB does not fit on the GPU (%.1f GB free): pinned host memory",
             split.nbytes() / 1e9, free / 1e9)
    return split.to(device, pin=True)


def iterate_batches(
    split: TensorSplit,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> Iterator[Batch]:
    """Batches of `split`: a random permutation drawn from `generator` when given (training), else the
    stored order (evaluation). The last batch may be smaller. Batches land on `device` (default: the
    split's own)."""
    n = len(split)
    device = split.device if device is None else device
    non_blocking = split.x_num.is_pinned() if split.device.type == "cpu" else False
    if generator is not None:
        order = torch.randperm(n, generator=generator, device=generator.device)
        if split.device.type == "cpu":
            # NOTE: on CPU the rows are gathered with numpy (single-threaded memcpy per row): ATen's
            # index_select runs these small gathers multi-threaded, which costs more than it saves and
            # stalls badly when the cores are shared (measured: 12-23 M vs 0.3-2.4 M samples/s).
            idx_all = order.cpu().numpy()
            arrays = [t.numpy() for t in (split.x_num, split.x_cat, split.y_float, split.y_long)]
            for start in range(0, n, batch_size):
                idx = idx_all[start : start + batch_size]
                x_num, x_cat, y_float, y_long = (torch.from_numpy(np.take(a, idx, axis=0)) for a in arrays)
                yield _to(Batch(x_num, x_cat, split.targets(y_float, y_long)), device, non_blocking)
            return
        if order.device != split.device:
            order = order.to(split.device)
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            yield _to(Batch(split.x_num.index_select(0, rows), split.x_cat.index_select(0, rows),
                            split.targets(split.y_float.index_select(0, rows), split.y_long.index_select(0, rows))),
                      device, non_blocking)
    else:
        for start in range(0, n, batch_size):
            sl = slice(start, start + batch_size)
            yield _to(Batch(split.x_num[sl], split.x_cat[sl], split.targets(split.y_float[sl], split.y_long[sl])),
                      device, non_blocking)


def _to(batch: Batch, device: torch.device, non_blocking: bool) -> Batch:
    if batch.x_num.device == device:
        return batch
    return Batch(batch.x_num.to(device, non_blocking=non_blocking), batch.x_cat.to(device, non_blocking=non_blocking),
                 {k: v.to(device, non_blocking=non_blocking) for k, v in batch.targets.items()})
