"""Offline stand-ins: generated rows with exactly a dataset's raw schema.

A stand-in has the real column names, dtypes, categorical cardinalities and value ranges, class balance close
to the paper's Table 1, and tasks that are learnable functions of the features and correlated with each other
(they share a hidden representation). It is *not* real data: every artifact built from it is marked
`standin: true` downstream.

Generation is vectorised and chunked (bounded memory at the real Higgs size of 11 M rows) and deterministic
for a seed: the generator's parameters come from one random stream, each chunk of rows from its own stream
spawned from the seed, and the score scale and label thresholds from a fixed pilot sample.

The written bytes do not depend on the CPU. numpy picks a kernel per CPU for its transcendental functions
(exp, tanh, power: AVX-512, AVX2 and baseline kernels differ in the last bit) and OpenBLAS one for matrix
products; float32 values computed with them differed between machines (dvc.lock's stand-in hashes changed
with the CPU). So the rows are computed in float64 from the random draws with operations IEEE 754 rounds
exactly on every CPU (+, -, *, /, sqrt, comparisons), one at a time in a fixed order: matrix products as
sums over the inner index (`_combine`), exp as (1 + x/2^16)^(2^16) by squaring (`_exp`), and the other
curves built on it; sums over rows use math.fsum (exactly rounded). Each value is rounded once, to
float32, when written. The random draws are numpy's Generator's: integer arithmetic and table look-ups,
except for the few normal draws outside the ziggurat's boxes, where the C library's exp decides whether to
keep a draw (a last-bit difference matters with probability about 2^-52) and log1p computes the rare
draws beyond 3.6 sigma.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from multitab.datasets.columnar import pandas_schema, parquet_options
from multitab.datasets.schema import DatasetSchema, Feature, Task

log = logging.getLogger(__name__)

CHUNK_ROWS = 250_000  # float64 signals of AliExpress' 75 features: ~150 MB a chunk
_N_LATENT = 6
_N_HIDDEN = 8
_PILOT_ROWS = 200_000
_EXP_SQUARINGS = 16  # _exp's relative error is about x^2 / 2^17 (3e-5 at |x| = 2), far below any use here


@dataclass(frozen=True)
class _Params:
    """The random structure of one stand-in dataset (drawn once per seed)."""

    feat_load: np.ndarray  # (n_latent, n_features): features as noisy functions of shared latents
    feat_scale: np.ndarray  # (n_features,): 1 / the signals' standard deviation
    hidden_w: np.ndarray  # (n_features, n_hidden): shared hidden layer of the task functions
    task_w: np.ndarray  # (n_hidden, n_tasks)
    task_lin: np.ndarray  # (n_features, n_tasks): a linear part per task
    score_scale: np.ndarray  # (n_tasks,): 1 / the pilot's standard deviation of each task's score
    thresholds: dict[str, np.ndarray]  # per classification task: cut points on its score


# -- exactly rounded arithmetic (see the module docstring: why not numpy's exp/tanh or BLAS)


def _combine(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(x.T @ w).T for x (k, n), w (k, m) -> (m, n), summed over k in order: no BLAS kernel chosen by the CPU.
    Row-major by variable so that every step is one contiguous vector operation."""
    out = np.empty((w.shape[1], x.shape[1]))
    term = np.empty(x.shape[1])
    for j in range(w.shape[1]):
        np.multiply(x[0], w[0, j], out=out[j])
        for k in range(1, w.shape[0]):
            np.multiply(x[k], w[k, j], out=term)
            out[j] += term
    return out


def _exp(x: np.ndarray | float) -> np.ndarray:
    """exp(x) as (1 + x / 2^16)^(2^16): multiplications only (x clipped to [-60, 60])."""
    y = np.asarray(1.0 + np.clip(x, -60.0, 60.0) / float(2**_EXP_SQUARINGS))
    for _ in range(_EXP_SQUARINGS):
        np.multiply(y, y, out=y)  # in place: the same products without an array per squaring
    return y


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + _exp(-x))


def _tanh(x: np.ndarray) -> np.ndarray:
    return 2.0 * _sigmoid(2.0 * x) - 1.0


def _std(x: np.ndarray) -> float:
    """Population standard deviation of a 1-D array, with exactly rounded sums."""
    mean = math.fsum(x.tolist()) / len(x)
    d = x - mean
    return math.sqrt(math.fsum((d * d).tolist()) / len(x))


# -- the generator


def _feature_values(f: Feature, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Map a standard-normal signal `v` to the feature's raw value range and dtype."""
    if f.kind == "categorical":
        card = int(f.cardinality or 2)
        # Skewed category frequencies (like real codes): squash the normal CDF (the logistic curve 1.702 v is
        # within 0.01 of it) to the power 1.75 (u * u^0.5 * u^0.25).
        u = _sigmoid(1.702 * v)
        root = np.sqrt(u)
        u = u * root * np.sqrt(root)
        idx = np.minimum((u * card).astype(np.int64), card - 1)
        if f.levels is not None:
            return np.asarray(f.levels, dtype=np.float32)[idx]
        first = int(f.low) if f.low is not None else 0
        last = int(f.high) if f.high is not None else first + card - 1
        step = max(1, (last - first) // max(card - 1, 1))
        return (first + idx * step).astype(np.int64)
    lo, hi = f.low, f.high
    if lo is not None and hi is not None and lo >= 0.0 and hi <= 1.0:
        return _sigmoid(1.5 * v).astype(np.float32)  # AliExpress: already scaled to [0, 1]
    if lo is not None and lo >= 0.0:
        # Momenta / energies: positive with a heavy right tail.
        out = _exp(0.45 * v - 0.1)
        return np.minimum(out, hi if hi is not None else np.inf).astype(np.float32)
    if f.name.endswith("_phi"):
        # Azimuthal angles carry no signal in reality: uniform over (-pi/2..pi/2 scaled) like the release.
        return rng.uniform(lo or -1.74, hi or 1.74, size=v.shape).astype(np.float32)
    spread = (hi - lo) / 6.0 if lo is not None and hi is not None else 1.0
    out = v * spread
    if lo is not None and hi is not None:
        out = np.clip(out, lo, hi)
    return out.astype(np.float32)


def _latent_features(schema: DatasetSchema, p: _Params, n: int, rng: np.random.Generator) -> np.ndarray:
    """Standard-normal feature signals (n_features, n) driven by shared latents plus own noise."""
    z = rng.standard_normal((_N_LATENT, n))
    sig = _combine(z, p.feat_load)
    sig += rng.standard_normal((len(schema.features), n))
    sig *= p.feat_scale[:, None]
    return sig


def _raw_scores(p: _Params, sig: np.ndarray) -> np.ndarray:
    """Task scores before scaling (n_tasks, n): a shared nonlinear part (correlates the tasks) + a per-task
    linear part."""
    return _combine(_tanh(_combine(sig, p.hidden_w)), p.task_w) + _combine(sig, p.task_lin)


def _task_scores(p: _Params, sig: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Task scores (n_tasks, n) at unit scale (the pilot's) plus noise."""
    score = _raw_scores(p, sig) * p.score_scale[:, None]
    score += 0.35 * rng.standard_normal(score.shape)
    return score


def _draw_params(schema: DatasetSchema, seed: int) -> _Params:
    rng = np.random.default_rng([seed, 0])
    n_feat, n_task = len(schema.features), len(schema.tasks)
    feat_load = rng.normal(0.0, 0.9, (_N_LATENT, n_feat))
    hidden_w = rng.normal(0.0, 1.0, (n_feat, _N_HIDDEN)) / math.sqrt(n_feat) * 2.0
    task_w = rng.normal(0.0, 1.0, (_N_HIDDEN, n_task))
    task_w += 0.8 * task_w[:, :1]  # a common direction: tasks correlate with the first
    task_lin = rng.normal(0.0, 1.0, (n_feat, n_task)) / math.sqrt(n_feat)
    # Angles are drawn independently of the signal (as in the release, they carry no label information).
    silent = np.array([f.name.endswith("_phi") for f in schema.features])
    hidden_w[silent] = 0.0
    task_lin[silent] = 0.0
    var = np.ones(n_feat)
    for row in feat_load:  # 1 + sum of squared loadings, in a fixed order
        var = var + row * row
    feat_scale = 1.0 / np.sqrt(var)
    p = _Params(feat_load, feat_scale, hidden_w, task_w, task_lin, np.ones(n_task), thresholds={})
    # The score scale and the cut points (class shares as in Table 1) from a pilot sample.
    pilot_rng = np.random.default_rng([seed, 1])
    raw = _raw_scores(p, _latent_features(schema, p, _PILOT_ROWS, pilot_rng))
    scale = np.array([1.0 / (_std(r) + 1e-6) for r in raw])
    p = _Params(feat_load, feat_scale, hidden_w, task_w, task_lin, scale, thresholds={})
    scores = raw * scale[:, None] + 0.35 * pilot_rng.standard_normal(raw.shape)
    for j, task in enumerate(schema.tasks):
        if task.class_ratio is not None:
            # Order statistics, not interpolated quantiles: a sorted value is the same on every CPU.
            ranked = np.sort(scores[j])
            cum = np.cumsum(task.class_ratio)[:-1] / sum(task.class_ratio)
            p.thresholds[task.name] = ranked[(cum * (len(ranked) - 1)).astype(np.int64)]
    return p


def _label_values(task: Task, score: np.ndarray, p: _Params) -> np.ndarray:
    """Raw label column of `task` from its score, in the raw column's units and dtype."""
    if task.type == "regression":
        # Positive, right-skewed like the Higgs invariant masses (around 1 in the release's scaling).
        return _exp(0.35 * score).astype(np.float32)
    cls = np.searchsorted(p.thresholds[task.name], score).astype(np.int64)
    if task.threshold is not None:
        # A binary task thresholding a raw quantity (ACS: PINCP > 50,000): emit the quantity itself.
        cut = p.thresholds[task.name][0]
        return (task.threshold * _exp(0.9 * (score - cut))).astype(np.float32)
    if task.codes is not None:
        return np.asarray(task.codes, dtype=np.int64)[cls]
    return cls


def _chunks(schema: DatasetSchema, p: _Params, n_rows: int, seed: int, stream: int) -> Iterator[dict[str, np.ndarray]]:
    children = np.random.SeedSequence([seed, 2, stream]).spawn(max(1, -(-n_rows // CHUNK_ROWS)))
    done = 0
    for child in children:
        n = min(CHUNK_ROWS, n_rows - done)
        if n <= 0:
            break
        rng = np.random.default_rng(child)
        sig = _latent_features(schema, p, n, rng)
        scores = _task_scores(p, sig, rng)
        cols: dict[str, np.ndarray] = {}
        for j, f in enumerate(schema.features):
            cols[f.name] = _feature_values(f, sig[j], rng)
        for j, t in enumerate(schema.tasks):
            cols[t.column] = _label_values(t, scores[j], p)
        del sig, scores
        frame: dict[str, np.ndarray] = {}
        for col in schema.raw_columns:
            if col.name in cols:
                values = cols[col.name]
            elif col.name.startswith("search_id"):
                values = np.arange(done, done + n, dtype=np.int64)
            else:
                # Columns the study drops as constant in the real data: constant here too.
                values = np.zeros(n, dtype=np.float32 if col.dtype == "float" else np.int64)
            frame[col.name] = values.astype(np.float32 if col.dtype == "float" else np.int64, copy=False)
        done += n
        yield frame
        del cols, frame, values  # before the next chunk's arrays are drawn


def _write_chunk(writer: pq.ParquetWriter, arrow_schema: pa.Schema, chunk: dict[str, np.ndarray]) -> None:
    # from_pandas: a NaN becomes null, as Table.from_pandas makes it
    arrays = [pa.array(v, type=arrow_schema.field(k).type, from_pandas=True) for k, v in chunk.items()]
    writer.write_table(pa.Table.from_arrays(arrays, schema=arrow_schema))


def write_standin(schema: DatasetSchema, rows: dict[str, int], seed: int, out_dir: Path) -> dict[str, int]:
    """Write one Parquet file per raw file of `schema` (`<file>.parquet`) into `out_dir`.
    Returns the row count per file."""
    missing = [k for k in schema.raw_files if k not in rows]
    extra = [k for k in rows if k not in schema.raw_files]
    if missing or extra:
        raise ValueError(
            f"{schema.name}: standin.rows must name exactly the raw files {list(schema.raw_files)} "
            f"(missing {missing}, unknown {extra}); fix datasets.{schema.name}.standin.rows in params.yaml"
        )
    for key, n in rows.items():
        if n < 10:
            raise ValueError(f"{schema.name}: standin.rows.{key}={n} must be >= 10")
    p = _draw_params(schema, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    # The file a DataFrame of the chunk would give (its pandas metadata), without the frame's two copies.
    arrow_schema = pandas_schema({c.name: np.float32 if c.dtype == "float" else np.int64 for c in schema.raw_columns})
    for stream, key in enumerate(schema.raw_files):
        # A chunk is encoded on a thread (Parquet's encoder releases the GIL; it took over half the CPU time)
        # while the next is drawn: the same tables in the same order, one more chunk held.
        with pq.ParquetWriter(out_dir / f"{key}.parquet", arrow_schema, **parquet_options(arrow_schema)) as writer, \
                ThreadPoolExecutor(1) as side:
            written: Future[None] | None = None
            for chunk in _chunks(schema, p, rows[key], seed, stream):
                if written is not None:
                    written.result()
                written = side.submit(_write_chunk, writer, arrow_schema, chunk)
                del chunk
            if written is not None:
                written.result()
        counts[key] = rows[key]
        log.info("stand-in %s/%s: %d rows", schema.name, key, rows[key])
    return counts
