"""Offline stand-ins: generated rows with exactly a dataset's raw schema.

A stand-in has the real column names, dtypes, categorical cardinalities and value ranges, class balance close
to the paper's Table 1, and tasks that are learnable functions of the features and correlated with each other
(they share a hidden representation). It is *not* real data: every artifact built from it is marked
`standin: true` downstream.

Generation is vectorised and chunked (bounded memory at the real Higgs size of 11 M rows) and deterministic
for a seed: the generator's parameters come from one random stream, each chunk of rows from its own stream
spawned from the seed, and the label thresholds from a fixed pilot sample.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.special import expit, ndtr

from multitab.datasets.columnar import pandas_schema
from multitab.datasets.schema import DatasetSchema, Feature, Task

log = logging.getLogger(__name__)

CHUNK_ROWS = 1_000_000
_N_LATENT = 6
_N_HIDDEN = 8
_PILOT_ROWS = 200_000


@dataclass(frozen=True)
class _Params:
    """The random structure of one stand-in dataset (drawn once per seed)."""

    feat_load: np.ndarray  # (n_latent, n_features): features as noisy functions of shared latents
    hidden_w: np.ndarray  # (n_features, n_hidden): shared hidden layer of the task functions
    task_w: np.ndarray  # (n_hidden, n_tasks)
    task_lin: np.ndarray  # (n_features, n_tasks): a linear part per task
    thresholds: dict[str, np.ndarray]  # per classification task: cut points on its score


def _feature_values(f: Feature, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Map a standard-normal signal `v` to the feature's raw value range and dtype."""
    if f.kind == "categorical":
        card = int(f.cardinality or 2)
        # Skewed category frequencies (like real codes): squash the normal CDF.
        u = ndtr(v) ** 1.7
        idx = np.minimum((u * card).astype(np.int64), card - 1)
        if f.levels is not None:
            return np.asarray(f.levels, dtype=np.float32)[idx]
        first = int(f.low) if f.low is not None else 0
        last = int(f.high) if f.high is not None else first + card - 1
        step = max(1, (last - first) // max(card - 1, 1))
        return (first + idx * step).astype(np.int64)
    lo, hi = f.low, f.high
    if lo is not None and hi is not None and lo >= 0.0 and hi <= 1.0:
        return expit(1.5 * v).astype(np.float32)  # AliExpress: already scaled to [0, 1]
    if lo is not None and lo >= 0.0:
        # Momenta / energies: positive with a heavy right tail.
        out = np.exp(0.45 * v - 0.1)
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
    """Standard-normal feature signals (n, n_features) driven by shared latents plus own noise."""
    z = rng.standard_normal((n, _N_LATENT), dtype=np.float32)
    own = rng.standard_normal((n, len(schema.features)), dtype=np.float32)
    sig = z @ p.feat_load
    sig += own
    sig /= np.sqrt(1.0 + (p.feat_load**2).sum(axis=0))
    return sig


def _task_scores(p: _Params, sig: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Task scores (n, n_tasks): a shared nonlinear part (correlates the tasks) + a per-task linear part."""
    hidden = np.tanh(sig @ p.hidden_w)
    score = hidden @ p.task_w + sig @ p.task_lin
    score /= score.std(axis=0, keepdims=True) + 1e-6
    score += 0.35 * rng.standard_normal(score.shape, dtype=np.float32)
    return score


def _draw_params(schema: DatasetSchema, seed: int) -> _Params:
    rng = np.random.default_rng([seed, 0])
    n_feat, n_task = len(schema.features), len(schema.tasks)
    feat_load = rng.normal(0.0, 0.9, (_N_LATENT, n_feat)).astype(np.float32)
    hidden_w = (rng.normal(0.0, 1.0, (n_feat, _N_HIDDEN)) / np.sqrt(n_feat) * 2.0).astype(np.float32)
    task_w = rng.normal(0.0, 1.0, (_N_HIDDEN, n_task)).astype(np.float32)
    task_w += 0.8 * task_w[:, :1]  # a common direction: tasks correlate with the first
    task_lin = (rng.normal(0.0, 1.0, (n_feat, n_task)) / np.sqrt(n_feat)).astype(np.float32)
    # Angles are drawn independently of the signal (as in the release, they carry no label information).
    silent = np.array([f.name.endswith("_phi") for f in schema.features])
    hidden_w[silent] = 0.0
    task_lin[silent] = 0.0
    p = _Params(feat_load, hidden_w, task_w, task_lin, thresholds={})
    # Cut points from a pilot sample so that class shares match Table 1.
    pilot_rng = np.random.default_rng([seed, 1])
    scores = _task_scores(p, _latent_features(schema, p, _PILOT_ROWS, pilot_rng), pilot_rng)
    for j, task in enumerate(schema.tasks):
        if task.class_ratio is not None:
            cum = np.cumsum(task.class_ratio)[:-1] / sum(task.class_ratio)
            p.thresholds[task.name] = np.quantile(scores[:, j], cum).astype(np.float32)
    return p


def _label_values(task: Task, score: np.ndarray, p: _Params) -> np.ndarray:
    """Raw label column of `task` from its score, in the raw column's units and dtype."""
    if task.type == "regression":
        # Positive, right-skewed like the Higgs invariant masses (around 1 in the release's scaling).
        return np.exp(0.35 * score).astype(np.float32)
    cls = np.searchsorted(p.thresholds[task.name], score).astype(np.int64)
    if task.threshold is not None:
        # A binary task thresholding a raw quantity (ACS: PINCP > 50,000): emit the quantity itself.
        cut = p.thresholds[task.name][0]
        return (task.threshold * np.exp(0.9 * (score - cut))).astype(np.float32)
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
            cols[f.name] = _feature_values(f, sig[:, j], rng)
        for j, t in enumerate(schema.tasks):
            cols[t.column] = _label_values(t, scores[:, j], p)
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
        with pq.ParquetWriter(out_dir / f"{key}.parquet", arrow_schema) as writer:
            for chunk in _chunks(schema, p, rows[key], seed, stream):
                writer.write_table(pa.Table.from_arrays([pa.array(v) for v in chunk.values()], schema=arrow_schema))
                del chunk
        counts[key] = rows[key]
        log.info("stand-in %s/%s: %d rows", schema.name, key, rows[key])
    return counts
