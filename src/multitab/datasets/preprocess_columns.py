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
The quantile map is quantile_map.py's (scikit-learn's, bit for bit, in less time). A declared dataset's numerical
feature with missing values (schema Feature.imputed) is first filled with its training split's median, here only:
the whole-frame path serves MultiTab-Bench and the estimator, whose features are never missing.

Columns run on worker processes (one per core, up to MAX_WORKERS) where the training split holds at least
POOL_MIN_VALUES numerical values, else in the stage's process: part of each column's work holds the GIL
(scikit-learn's and scipy's Python between the numpy kernels, Parquet to pandas), so threads kept one core busy.
The workers start from a fork server (`forkserver`; `spawn` where there is none): a process started afresh,
single-threaded, that imports this module once and forks each worker. A fork of the stage's own process could
deadlock, as the stage may hold threads (pyarrow's thread pools; a test runner calling the stage's main
in-process) whose locks a forked child inherits held. Each job reads its column from the split files, takes
its noise from the store the stage parked it in, and parks its outputs in a folder of its own that the
stage's store adopts. The task columns go first, made by the workers while the stage draws the noise that
the feature columns wait for. The three files are then written on three threads (Parquet encoding releases the GIL).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.preprocessing import OrdinalEncoder, StandardScaler

from multitab.config.data import PreprocessConfig
from multitab.datasets.columnar import ColumnStore, ParquetColumns, column_store, write_parquet_columns
from multitab.datasets.preprocess import n_quantiles, processed_meta
from multitab.datasets.quantile_map import NormalQuantileMap, fit_normal_quantiles
from multitab.datasets.schema import DatasetSchema, Task
from multitab.datasets.split import SPLITS

log = logging.getLogger(__name__)

IMPUTED = ("median: each column's missing values (NaN) filled with the median of its train split's values (fitted on "
           "train only), before the numerical transform; `missing` counts the values filled per split")
BLOCK_ROWS = 1 << 20  # rows transformed (or noise rows drawn) at once
MAX_WORKERS = 4  # each worker holds a few columns of the training split
# Below this many training values (rows x numerical features) the columns run in the stage's process: the
# pool's start (a fork server importing scikit-learn, ~2 s) would cost more than it saves.
POOL_MIN_VALUES = 4_000_000


def workers(n_values: int) -> int:
    """Worker processes for a training split of `n_values` numerical values (1: none, in-process)."""
    if n_values < POOL_MIN_VALUES:
        return 1
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


class _InProcess(Executor):
    """The jobs run as they are submitted, in this process."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        job: Future[Any] = Future()
        try:
            job.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the caller by job.result(), as a pool does
            job.set_exception(e)
        return job


@contextmanager
def _pool(n: int) -> Iterator[Executor]:
    if n <= 1:
        yield _InProcess()
        return
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__])  # imported once by the server, inherited by every worker
    with ProcessPoolExecutor(n, mp_context=ctx) as pool:
        yield pool


def _blocks(n: int, rows: int) -> range:
    return range(0, n, rows)


def _park_noise(parked: ColumnStore, cfg: PreprocessConfig, n_rows: int, names: list[str], rows: int) -> ColumnStore:
    """preprocess.py's noise matrix (rows x columns, one standard-normal stream in row-major order), parked
    by column as `noise/<name>` in `parked` (returned)."""
    rng = np.random.default_rng(cfg.seed)
    block = np.empty((min(rows, n_rows), len(names)), dtype=np.float32)
    for start in _blocks(n_rows, rows):
        part = block[: min(rows, n_rows - start)]
        rng.standard_normal(out=part, dtype=np.float32)  # into one buffer: the same stream, no new pages
        for j, name in enumerate(names):
            parked.append(f"noise/{name}", part[:, j])
    return parked


def _transform_blocks(
    parked: ColumnStore, split: str, name: str, values: np.ndarray, fn: Callable[[np.ndarray], np.ndarray], rows: int
) -> None:
    parked.drop(f"{split}/{name}")
    for start in _blocks(len(values), rows):
        parked.append(f"{split}/{name}", fn(values[start : start + rows]))


def _column(
    kind: str, name: str, files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore,
    noise: ColumnStore | None, rows: int, imputed: bool = False,
) -> tuple[ColumnStore, int | None, dict[str, Any] | None]:
    """A job: column `name` parked in `parked` (a worker's: a new folder of its own); its cardinality if
    categorical; what filled its missing values if `imputed`."""
    parked.folder.mkdir()
    if kind == "numerical":
        return parked, None, _numerical(name, files, cfg, parked, noise, rows, imputed)
    return parked, _categorical(name, files, parked, rows), None


def _fill(values: np.ndarray, value: float) -> int:
    """Missing values of `values` set to `value` in place; how many there were."""
    missing = np.isnan(values)
    values[missing] = value
    return int(missing.sum())


def _numerical(
    name: str, files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore,
    noise: ColumnStore | None, rows: int, imputed: bool = False,
) -> dict[str, Any] | None:
    """Fit numerical column `name` on train (plus its noise, parked in `noise`, scaled by the column's standard
    deviation), park it for every split. `imputed`: its missing values are first filled with train's median (what
    filled them is returned)."""
    train = files["train"].series(name).to_numpy(dtype=np.float32, copy=True)
    fill: dict[str, Any] | None = None
    if imputed:
        if np.isnan(train).all():
            raise ValueError(f"{name!r}: every value of the train split is missing; there is no median to fill it "
                             "with: drop the column (features.drop)")
        median = float(np.nanmedian(train.astype(np.float64)))
        fill = {"value": median, "missing": {"train": _fill(train, median)}}
    if cfg.numerical == "none":
        fn: Callable[[np.ndarray], np.ndarray] = lambda v: v.astype(np.float32, copy=False)  # noqa: E731
    elif cfg.numerical == "standard":
        scaler = StandardScaler().fit(train.reshape(-1, 1))
        fn = lambda v: scaler.transform(v.reshape(-1, 1)).astype(np.float32)[:, 0]  # noqa: E731
    else:
        if noise is not None:
            # preprocess.py's scale: noise / max(std, noise) in float32, the std of the float32 column
            scale = np.float32(cfg.noise / np.maximum(train.std(), cfg.noise))
            train += scale * noise.get(f"noise/{name}")
            noise.drop(f"noise/{name}")  # its file: the disk holds the noise of the columns still to come
        qt = fit_normal_quantiles(train, n_quantiles=n_quantiles(len(train), cfg),
                                  subsample=cfg.subsample, seed=cfg.seed)
        fn = NormalQuantileMap(qt)  # its tables built once, for every block of every split
    _transform_blocks(parked, "train", name, train, fn, rows)
    del train
    for split in ("val", "test"):
        values = files[split].series(name).to_numpy(dtype=np.float32, copy=fill is not None)
        if fill is not None:
            fill["missing"][split] = _fill(values, fill["value"])
        _transform_blocks(parked, split, name, values, fn, rows)
    return fill


def _categorical(name: str, files: Mapping[str, ParquetColumns], parked: ColumnStore, rows: int) -> int:
    """Ordinal codes of categorical column `name` fit on train (0: unseen in train); its cardinality."""
    enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, dtype=np.float64)
    enc.fit(files["train"].series(name).to_numpy().reshape(-1, 1))
    for split in SPLITS:
        _transform_blocks(parked, split, name, files[split].series(name).to_numpy(),
                          lambda v: (enc.transform(v.reshape(-1, 1)) + 1).astype(np.int64)[:, 0], rows)
    return len(enc.categories_[0]) + 1


def preprocess_files(
    schema: DatasetSchema, splits_dir: Path, out_dir: Path, cfg: PreprocessConfig, info: dict[str, Any],
    *, n_workers: int | None = None,
) -> dict[str, Any]:
    """data/splits/<D>/{train,val,test}.parquet -> the same files in `out_dir` transformed as
    `preprocess.preprocess` transforms the frames; returns meta.json's content. `n_workers`: worker processes
    (1: none; default: `workers`). The scratch columns are parked inside `out_dir` (`columnar.column_store`: the
    output's temporary folder) and removed before this returns."""
    files = {k: ParquetColumns(splits_dir / f"{k}.parquet") for k in SPLITS}
    for split, part in files.items():
        if part.n_rows == 0:
            raise ValueError(f"{schema.name}/{split}: split has zero rows; nothing to preprocess")
    num_names = [f.name for f in schema.features if f.kind == "numerical"]
    n = n_workers if n_workers is not None else workers(files["train"].n_rows * len(num_names))
    with column_store(out_dir) as parked, _pool(n) as pool:
        with ThreadPoolExecutor(1) as side:  # the generator releases the GIL
            drawn = _draw_noise(files, cfg, parked, side, num_names)
            # the task columns first: the workers start and make them while the noise is drawn
            tasks = [pool.submit(_task, t, files, cfg, ColumnStore(parked.folder / f"task{i}"), BLOCK_ROWS)
                     for i, t in enumerate(schema.tasks)]
            for _ in range(MAX_WORKERS):
                pool.submit(os.getpid)
            noise = None if drawn is None else drawn.result()
        kinds = [(f.name, f.kind) for f in schema.features if f.kind in ("numerical", "categorical")]
        imputed = {f.name for f in schema.features if f.imputed}
        jobs = {name: pool.submit(_column, kind, name, files, cfg, ColumnStore(parked.folder / f"column{i}"),
                                  noise, BLOCK_ROWS, name in imputed)
                for i, (name, kind) in enumerate(kinds)}
        target_stats: dict[str, dict[str, float]] = {}
        for task in tasks:
            column, stats = task.result()
            parked.adopt(column)
            target_stats.update(stats)
        cardinalities: dict[str, int] = {}
        fills: dict[str, dict[str, Any]] = {}
        for name, job in jobs.items():
            column, cardinality, fill = job.result()
            parked.adopt(column)
            if cardinality is not None:
                cardinalities[name] = cardinality
            if fill is not None:
                fills[name] = fill
        dtypes = {name: parked.dtype(f"train/{name}") for name in schema.canonical_columns}
        with ThreadPoolExecutor(len(SPLITS)) as writers:
            for write in [writers.submit(write_parquet_columns, out_dir / f"{split}.parquet", dtypes,
                                         files[split].n_rows, parked.reader(f"{split}/")) for split in SPLITS]:
                write.result()
    n_rows = {k: f.n_rows for k, f in files.items()}
    log.info("%s preprocessed a column at a time (%d processes): %s", schema.name, n, n_rows)
    meta = processed_meta(schema, cfg, info, cardinalities, target_stats, n_rows)
    if fills:  # a declared dataset's numerical features with missing values (datasets.<D>.features.missing)
        meta["imputed"] = {"strategy": IMPUTED, "columns": fills}
    return meta


def _draw_noise(
    files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore, side: Executor,
    num_names: list[str],
) -> Future[ColumnStore] | None:
    """The training features' noise being parked in `parked` on `side` (None: no noise)."""
    if cfg.numerical != "quantile" or cfg.noise <= 0 or not num_names:
        return None
    # Noise once, before fitting, so features with few distinct values get a smooth quantile map.
    return side.submit(_park_noise, parked, cfg, files["train"].n_rows, num_names, BLOCK_ROWS)


def _task(
    t: Task, files: Mapping[str, ParquetColumns], cfg: PreprocessConfig, parked: ColumnStore, rows: int
) -> tuple[ColumnStore, dict[str, dict[str, float]]]:
    """A job: task column `t` parked in `parked` (a folder of its own), a regression target raw or standardised
    with train's statistics (float32), a label int64; the target's statistics ({} for a label)."""
    parked.folder.mkdir()
    stats: dict[str, dict[str, float]] = {}
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
            _transform_blocks(parked, split, t.name, y, partial(_standardise, mean=mean, std=std), rows)
        else:
            _transform_blocks(parked, split, t.name, y, partial(np.asarray, dtype=np.int64), rows)
    return parked, stats


def _standardise(v: np.ndarray, *, mean: float, std: float) -> np.ndarray:
    return ((v.astype(np.float64) - mean) / std).astype(np.float32)
