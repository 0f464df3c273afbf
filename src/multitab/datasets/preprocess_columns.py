"""preprocess@D a column at a time: the transforms of preprocess.py, fit on each column of the training split
and applied to that column of every split, the splits read from and written to Parquet by columns
(columnar.py). Memory holds a few columns, not the table.

The same numbers as `preprocess.preprocess` on whole frames (tests/test_preprocess_columns.py compares the
files byte for byte):
- the training features' noise is drawn as preprocess.py draws it, one (rows, numerical features) matrix in
  row-major order from one generator, here a block of rows at a time (the same stream), and parked by column;
- its scale uses each column's standard deviation: numpy reduces each column of the frame's (column-major)
  feature matrix on its own, as it reduces the column alone;
- scikit-learn fits QuantileTransformer, StandardScaler and OrdinalEncoder column by column (the same
  subsample rows for every column), so one per column gives the same map; their transforms work value by
  value, so a block of rows at a time gives the same values.
Columns run on a thread pool: np.interp, the normal quantile function and Parquet decoding release the GIL.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.preprocessing import OrdinalEncoder, QuantileTransformer, StandardScaler

from multitab.config.data import PreprocessConfig
from multitab.datasets.columnar import ColumnStore, ParquetColumns, column_store, write_parquet_columns
from multitab.datasets.preprocess import processed_meta
from multitab.datasets.schema import DatasetSchema
from multitab.datasets.split import SPLITS

log = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 20  # rows transformed (or noise rows drawn) at once
MAX_THREADS = 4  # each thread holds a few columns of the training split


def threads() -> int:
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


def _blocks(n: int) -> range:
    return range(0, n, BLOCK_ROWS)


def _park_noise(parked: ColumnStore, cfg: PreprocessConfig, n_rows: int, names: list[str]) -> None:
    """preprocess.py's noise matrix (rows x columns, one standard-normal stream in row-major order), parked
    by column as `noise/<name>`."""
    rng = np.random.default_rng(cfg.seed)
    for start in _blocks(n_rows):
        block = rng.standard_normal((min(BLOCK_ROWS, n_rows - start), len(names)), dtype=np.float32)
        for j, name in enumerate(names):
            parked.append(f"noise/{name}", block[:, j])


def _transform_blocks(
    parked: ColumnStore, split: str, name: str, values: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]
) -> None:
    parked.drop(f"{split}/{name}")
    for start in _blocks(len(values)):
        parked.append(f"{split}/{name}", fn(values[start : start + BLOCK_ROWS]))


def _numerical(
    name: str, files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore, scale: float | None
) -> None:
    """Fit numerical column `name` on train (plus its noise at relative `scale`), park it for every split."""
    train = files["train"].series(name).to_numpy(dtype=np.float32, copy=True)
    if cfg.numerical == "none":
        fn: Callable[[np.ndarray], np.ndarray] = lambda v: v.astype(np.float32, copy=False)  # noqa: E731
    elif cfg.numerical == "standard":
        scaler = StandardScaler().fit(train.reshape(-1, 1))
        fn = lambda v: scaler.transform(v.reshape(-1, 1)).astype(np.float32)[:, 0]  # noqa: E731
    else:
        if scale is not None:
            train += np.float32(scale) * parked.get(f"noise/{name}")
            parked.drop(f"noise/{name}")
        qt = QuantileTransformer(
            n_quantiles=max(min(len(train) // 30, cfg.max_quantiles), 10),
            output_distribution="normal",
            subsample=cfg.subsample,
            random_state=cfg.seed,
            copy=False,
        ).fit(train.reshape(-1, 1))
        fn = lambda v: qt.transform(v.reshape(-1, 1)).astype(np.float32, copy=False)[:, 0]  # noqa: E731
    _transform_blocks(parked, "train", name, train, fn)
    del train
    for split in ("val", "test"):
        _transform_blocks(parked, split, name, files[split].series(name).to_numpy(dtype=np.float32), fn)


def _categorical(name: str, files: Mapping[str, ParquetColumns], parked: ColumnStore) -> int:
    """Ordinal codes of categorical column `name` fit on train (0: unseen in train); its cardinality."""
    enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, dtype=np.float64)
    enc.fit(files["train"].series(name).to_numpy().reshape(-1, 1))
    for split in SPLITS:
        _transform_blocks(parked, split, name, files[split].series(name).to_numpy(),
                          lambda v: (enc.transform(v.reshape(-1, 1)) + 1).astype(np.int64)[:, 0])
    return len(enc.categories_[0]) + 1


def preprocess_files(
    schema: DatasetSchema, splits_dir: Path, out_dir: Path, cfg: PreprocessConfig, info: dict[str, Any]
) -> dict[str, Any]:
    """data/splits/<D>/{train,val,test}.parquet -> the same files in `out_dir` transformed as
    `preprocess.preprocess` transforms the frames; returns meta.json's content."""
    files = {k: ParquetColumns(splits_dir / f"{k}.parquet") for k in SPLITS}
    for split, part in files.items():
        if part.n_rows == 0:
            raise ValueError(f"{schema.name}/{split}: split has zero rows; nothing to preprocess")
    num_names = [f.name for f in schema.features if f.kind == "numerical"]
    n_train = files["train"].n_rows
    with column_store(out_dir) as parked:
        scales: dict[str, float | None] = dict.fromkeys(num_names)
        if cfg.numerical == "quantile" and cfg.noise > 0 and num_names:
            # Noise once, before fitting, so features with few distinct values get a smooth quantile map.
            stds = np.array([files["train"].series(n).to_numpy(dtype=np.float32).std() for n in num_names],
                            dtype=np.float32)
            scales = dict(zip(num_names, (cfg.noise / np.maximum(stds, cfg.noise)).astype(np.float32)))
            _park_noise(parked, cfg, n_train, num_names)
        with ThreadPoolExecutor(threads()) as pool:
            numerical = [pool.submit(_numerical, name, files, cfg, parked, scales[name]) for name in num_names]
            categorical = {f.name: pool.submit(_categorical, f.name, files, parked)
                           for f in schema.features if f.kind == "categorical"}
            for job in numerical:
                job.result()
            cardinalities = {name: job.result() for name, job in categorical.items()}
        target_stats = _targets(schema, files, cfg, parked)
        dtypes = {name: parked.dtype(f"train/{name}") for name in schema.canonical_columns}
        for split in SPLITS:
            write_parquet_columns(out_dir / f"{split}.parquet", dtypes, files[split].n_rows, parked.reader(f"{split}/"))
    n_rows = {k: f.n_rows for k, f in files.items()}
    log.info("%s preprocessed a column at a time (%d threads): %s", schema.name, threads(), n_rows)
    return processed_meta(schema, cfg, info, cardinalities, target_stats, n_rows)


def _targets(
    schema: DatasetSchema, files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore
) -> dict[str, dict[str, float]]:
    """Task columns: regression targets raw or standardised with train's statistics (float32), labels int64."""
    stats: dict[str, dict[str, float]] = {}
    for t in schema.tasks:
        if t.type == "regression":
            y = files["train"].series(t.name).to_numpy(dtype=np.float64)
            if cfg.targets == "standard":
                stats[t.name] = {"mean": float(y.mean()), "std": float(y.std() or 1.0)}
            else:
                stats[t.name] = {"mean": 0.0, "std": 1.0}
            del y
        for split in SPLITS:
            y = files[split].series(t.name).to_numpy()
            if t.type == "regression":
                mean, std = stats[t.name]["mean"], stats[t.name]["std"]
                _transform_blocks(parked, split, t.name, y, partial(_standardise, mean=mean, std=std))
            else:
                _transform_blocks(parked, split, t.name, y, partial(np.asarray, dtype=np.int64))
    return stats


def _standardise(v: np.ndarray, *, mean: float, std: float) -> np.ndarray:
    return ((v.astype(np.float64) - mean) / std).astype(np.float32)
