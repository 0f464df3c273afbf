"""The processed stand-in folders of benchmarks/train_memory.py, in preprocess's format at the real releases'
rows per split (float32 numerical features, int64 categorical codes with 0 reserved, int64 binary / float32
regression targets, row groups of 2^20 rows as pyarrow writes them), and the bytes of the tensors a run holds.
A module beside the script, not a script.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from multitab.datasets.schema import SCHEMAS, DatasetSchema

# the real releases' rows per split (AliExpress: the official train file split 0.9 / 0.1 into train / val)
SIZES = {
    "aliexpress": {"train": 10_942_105, "val": 1_215_789, "test": 5_559_301},
    "higgs": {"train": 9_900_000, "val": 550_000, "test": 550_000},
}
ROW_GROUP = 1 << 20  # pyarrow's default row group (rows)


def processed_meta(schema: DatasetSchema, sizes: dict[str, int]) -> dict[str, Any]:
    """meta.json as preprocess writes it (categorical cardinality + 1: code 0 is the unseen-in-train index)."""
    return {
        "dataset": schema.name,
        "features": [{"name": f.name, "kind": f.kind,
                      "cardinality": (f.cardinality or 1) + 1 if f.kind == "categorical" else None}
                     for f in schema.features],
        "tasks": [{"name": t.name, "type": t.type,
                   "n_classes": t.n_classes if t.type == "multiclass" else (2 if t.type == "binary" else None)}
                  for t in schema.tasks],
        "source": "standin", "standin": True, "n_rows": sizes,
        "target_stats": {t.name: {"mean": 0.0, "std": 1.0} for t in schema.tasks if t.type == "regression"},
        "numerical_transform": "quantile", "target_transform": "raw", "inputs": {"benchmark": "train_memory"},
    }


def _chunk(schema: DatasetSchema, rows: int, rng: np.random.Generator) -> pa.Table:
    cols: dict[str, np.ndarray] = {}
    for f in schema.features:
        if f.kind == "numerical":
            cols[f.name] = rng.standard_normal(rows, dtype=np.float32)  # the quantile transform's normal output
        else:
            cols[f.name] = rng.integers(1, (f.cardinality or 1) + 1, rows, dtype=np.int64)
    for t in schema.tasks:
        if t.type == "binary":
            positive = (t.class_ratio[1] if t.class_ratio else 50.0) / 100.0
            cols[t.name] = (rng.random(rows, dtype=np.float32) < positive).astype(np.int64)
        elif t.type == "regression":
            cols[t.name] = rng.lognormal(0.0, 0.3, rows).astype(np.float32)
        else:
            cols[t.name] = rng.integers(0, t.n_classes or 2, rows, dtype=np.int64)
    return pa.table(cols)


def write_processed(path: Path, dataset: str, sizes: dict[str, int], seed: int = 0) -> None:
    """A processed stand-in folder, written chunk by chunk (the writer holds one row group)."""
    schema = SCHEMAS[dataset]
    meta = processed_meta(schema, sizes)
    if (path / "meta.json").is_file() and json.loads((path / "meta.json").read_text()) == meta:
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        first = _chunk(schema, min(n, ROW_GROUP), rng)
        with pq.ParquetWriter(path / f"{split}.parquet", first.schema) as writer:
            writer.write_table(first, row_group_size=ROW_GROUP)
            for start in range(ROW_GROUP, n, ROW_GROUP):
                writer.write_table(_chunk(schema, min(ROW_GROUP, n - start), rng), row_group_size=ROW_GROUP)
    (path / "meta.json").write_text(json.dumps(meta, indent=2))  # last: a folder without it is rewritten


def tensor_bytes(schema: DatasetSchema, rows: int) -> int:
    """Bytes of a split's tensors: float32 numerical features and float targets, int64 codes and classes."""
    n_float = sum(t.type != "multiclass" for t in schema.tasks)
    n_long = sum(t.type == "multiclass" for t in schema.tasks)
    return rows * (4 * schema.n_num + 8 * schema.n_cat + 4 * n_float + 8 * n_long)
