"""The two validations of the pipeline: `validate_raw` (canonical split files, before preprocessing) and
`validate_processed` (processed splits and MultiTab-Bench outputs, before training)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

import multitab.validation.suites as suites
from multitab.config.data import DatasetConfig
from multitab.config.validation import (
    CHECK_GROUPS,
    PROCESSED_CHECKS,
    ProcessedConfig,
    RawConfig,
    ValidationConfig,
)
from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.files.io import read_json, sha256_file
from multitab.validation.columns import BATCH_BYTES, WHOLE_BYTES, SplitData
from multitab.validation.failures import Outcome
from multitab.validation.normal_bounds import quantile_output_bounds
from multitab.validation.own_checks import extra_checks
from multitab.validation.runner import open_context, run_suites

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


def expected_rows(
    schema: DatasetSchema, data: DatasetConfig, slack: int, observed: Mapping[str, int]
) -> dict[str, tuple[int, int | None]]:
    """Allowed row counts per split: exact (± `slack` rows of rounding) for `remote` (the schema's real
    row counts) and stand-ins (params: datasets.<D>.standin.rows), and for `local` files the split
    fractions of the rows found. Every split needs at least one row."""
    if data.source == "remote":
        totals: Mapping[str, int] | None = schema.real_rows
    elif data.source == "standin":
        totals = data.standin.rows
    else:
        totals = None
    sp = data.split
    if "val" in schema.raw_files:  # every split is a file of its own, whole: any number of rows
        want: dict[str, float | None] = dict.fromkeys(SPLITS)
    elif sp.method == "official_test":
        n_train_file = totals["train"] if totals else observed["train"] + observed["val"]
        n_val = sp.val_fraction * n_train_file
        want = {
            "train": n_train_file - n_val,
            "val": n_val,
            "test": totals["test"] if totals else None,
        }
    else:
        n = sum(totals.values()) if totals else sum(observed.values())
        n_val, n_test = sp.val_fraction * n, sp.test_fraction * n
        want = {"train": n - n_val - n_test, "val": n_val, "test": n_test}
    out: dict[str, tuple[int, int | None]] = {}
    for split, w in want.items():
        if w is None:
            out[split] = (1, None)
        else:
            out[split] = (max(1, int(np.floor(w)) - slack), int(np.ceil(w)) + slack)
    return out


def _read_splits(folder: Path, stage: str, batch_bytes: int, whole_bytes: int
                 ) -> tuple[dict[str, SplitData], dict[str, str]]:
    """The splits of `folder` (held whole up to `whole_bytes`, else read by columns) and their sha256."""
    for split in SPLITS:
        path = folder / f"{split}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{stage}: {path} not found; run the stage that writes {folder} first")
    splits, inputs = {}, {}
    for split in SPLITS:
        path = folder / f"{split}.parquet"
        splits[split] = SplitData(path, batch_bytes, whole_bytes)
        inputs[path.name] = sha256_file(path)
    return splits, inputs


def _train_values(
    schema: DatasetSchema, train: SplitData, min_rows_per_value: float
) -> dict[str, list[int]]:
    """The values of each categorical feature seen in train (integer columns only), for the columns where
    train has enough rows per value for "unseen in train" to mean something."""
    out = {}
    for f in schema.features:
        if f.kind != "categorical" or f.name not in train.columns:
            continue
        col = train.series(f.name)
        if not pd.api.types.is_integer_dtype(col):
            continue  # the dtype expectation reports it
        values = np.unique(col.to_numpy())
        if train.n_rows >= min_rows_per_value * len(values):
            out[f.name] = values.tolist()
        else:
            log.info(
                "%s: %d values on %d train rows: unseen-in-train check skipped",
                f.name,
                len(values),
                train.n_rows,
            )
    return out


def _train_ranges(
    schema: DatasetSchema, train: SplitData, min_rows_per_value: float
) -> dict[str, tuple[int, int]]:
    """Train's code range of each categorical feature whose cardinality is only an estimate, where train
    has enough rows per value for a code outside that range to mean something (as `_train_values`)."""
    out = {}
    for f in schema.features:
        if f.cardinality_is_estimate and f.name in train.columns and train.n_rows:
            series = train.series(f.name)
            if pd.api.types.is_integer_dtype(series):
                col = series.to_numpy()
                if train.n_rows >= min_rows_per_value * len(np.unique(col)):
                    out[f.name] = (int(col.min()), int(col.max()))
    return out


def unseen_rates(schema: DatasetSchema, train: SplitData, raw: RawConfig, *, declared: bool = False
                 ) -> dict[str, float]:
    """The rate of val/test rows with a value unseen in train that train predicts, per id-like column (the schema's
    estimated cardinalities) and, for a `declared` dataset (whose levels nobody published), per categorical column:
    `unseen_ids_factor` times the Good-Turing estimate of the chance that a new row holds an unseen value (the share
    of train rows whose value occurs once in train), at least `unseen_max_fraction`, at most 1. The suites add what
    sampling gives on a split's rows (suites.tolerated_share)."""
    out = {}
    for f in schema.features:
        judged = f.cardinality_is_estimate or (declared and f.kind == "categorical")
        if not judged or f.name not in train.columns or not train.n_rows:
            continue
        counts = train.series(f.name).value_counts(dropna=True)
        once = float((counts == 1).sum()) / train.n_rows
        out[f.name] = min(1.0, max(raw.unseen_max_fraction, raw.unseen_ids_factor * once))
    return out


def raw_hints(dataset: str, declared: bool) -> dict[str, str]:
    """Check id -> the params.yaml key that would change a failed check's outcome: a policy group's level, and for a
    declared dataset its split (a split without a positive, a regression target with one value in a split)."""
    out = {check: f"to let it pass: params.yaml validation.policy.{dataset}.{group}: warn"
           for check, group in CHECK_GROUPS.items()}
    if declared:
        split = (f"to change it: params.yaml datasets.{dataset}.split (val_fraction, test_fraction: more rows per "
                 "split; or another seed)")
        out |= {"positives": split, "constant": split}
    return out


def validate_raw(
    splits_dir: str | Path,
    schema: DatasetSchema,
    data: DatasetConfig,
    cfg: ValidationConfig,
    *,
    context_dir: str | Path,
    report_dir: str | Path,
    keep_runs: int | None = None,
    batch_bytes: int = BATCH_BYTES,
    whole_bytes: int = WHOLE_BYTES,
) -> Outcome:
    """Validate data/splits/<D>/{train,val,test}.parquet against the schema's raw suite (and the checks of
    `extra_checks`); keep the validation results of the newest `keep_runs` runs. A split larger than
    `whole_bytes` is read and validated a few columns at a time, `batch_bytes` a batch (columns.py): the same
    results."""
    splits_dir = Path(splits_dir)
    splits, inputs = _read_splits(splits_dir, "validate_raw", batch_bytes, whole_bytes)
    rows = expected_rows(schema, data, cfg.raw.row_count_slack, {s: d.n_rows for s, d in splits.items()})
    train = splits["train"]
    values = _train_values(schema, train, cfg.raw.unseen_min_rows_per_value)
    ranges = _train_ranges(schema, train, cfg.raw.unseen_min_rows_per_value)
    id_rates = unseen_rates(schema, train, cfg.raw, declared=data.declared)
    built = {
        split: suites.raw_suite(
            schema,
            split,
            cfg.raw,
            rows=rows[split],
            n_rows=part.n_rows,
            train_columns=None if split == "train" else train.columns,
            train_values=None if split == "train" else values,
            train_ranges=None if split == "train" else ranges,
            unseen_id_rates=None if split == "train" else id_rates,
        )
        for split, part in splits.items()
    }
    extra = extra_checks(schema, splits, cfg)
    policy = cfg.policy_for(schema.name)
    with open_context(context_dir, report_dir) as context:
        return run_suites(
            context,
            stage="validate_raw",
            dataset=schema.name,
            splits=splits,
            suites=built,
            report_dir=report_dir,
            report=cfg.report,
            inputs=inputs,
            extra=extra,
            levels=policy.levels(),
            policy=policy.as_dict(),
            keep_runs=keep_runs,
            hints=raw_hints(schema.name, data.declared),
        )


def validate_processed(
    processed_dir: str | Path,
    cfg: ValidationConfig,
    *,
    context_dir: str | Path,
    report_dir: str | Path,
    keep_runs: int | None = None,
    batch_bytes: int = BATCH_BYTES,
    whole_bytes: int = WHOLE_BYTES,
) -> Outcome:
    """Validate data/processed/<D>/ (or a MultiTab-Bench output folder) against its meta.json; keep the
    validation results of the newest `keep_runs` runs; `batch_bytes` and `whole_bytes` as `validate_raw`'s."""
    processed_dir = Path(processed_dir)
    meta_path = processed_dir / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(
            f"validate_processed: {meta_path} not found; run preprocess (or synthesize) first"
        )
    meta = read_json(meta_path)
    schema = schema_from_meta(meta)
    n_rows = meta.get("n_rows") or {}
    missing = [s for s in SPLITS if s not in n_rows]
    if missing:
        raise ValueError(f"validate_processed: {meta_path} has no n_rows for {missing}; re-run its stage")
    splits, inputs = _read_splits(processed_dir, "validate_processed", batch_bytes, whole_bytes)
    inputs[meta_path.name] = sha256_file(meta_path)
    train_columns = splits["train"].columns
    widened = widened_ranges(schema, meta, splits["train"], cfg.processed)
    built = {
        split: suites.processed_suite(
            schema,
            split,
            cfg.processed,
            n_rows=int(n_rows[split]),
            train_columns=None if split == "train" else train_columns,
            standard_targets=meta.get("target_transform", "standard") == "standard",
            widened=widened,
        )
        for split in splits
    }
    level = cfg.processed.policy.get(schema.name)
    relax = (f"to let it pass: params.yaml validation.processed.policy.{schema.name}: warn (or widen "
             "validation.processed's normal_mean_tolerance / normal_std_low / normal_std_high)")
    with open_context(context_dir, report_dir) as context:
        return run_suites(
            context,
            stage="validate_processed",
            dataset=schema.name,
            splits=splits,
            suites=built,
            report_dir=report_dir,
            report=cfg.report,
            inputs=inputs,
            keep_runs=keep_runs,
            levels=dict.fromkeys(PROCESSED_CHECKS, level or "error"),
            policy={"distributions": level} if level else None,
            hints=dict.fromkeys(PROCESSED_CHECKS, relax),
        )


def widened_ranges(schema: DatasetSchema, meta: Mapping[str, object], train: SplitData, cfg: ProcessedConfig
                   ) -> dict[str, suites.NormalRange]:
    """Quantile-transformed feature -> its (mean, standard deviation) ranges widened to what the map can give on the
    training split (normal_bounds: its rows, meta.json's `n_quantiles`, its ties), for the columns outside the
    configured ranges (within them the configured ranges stand: the same verdict, no sort)."""
    q, subsample = meta.get("n_quantiles"), meta.get("quantile_subsample")
    if meta.get("numerical_transform") != "quantile" or not isinstance(q, int):
        return {}
    if isinstance(subsample, int) and subsample < train.n_rows:  # quantiles of a subsample: no bound on train's rows
        return {}
    (mean_lo, mean_hi), (std_lo, std_hi) = suites.normal_ranges(cfg)
    out = {}
    for f in schema.features:
        if f.kind != "numerical" or f.name not in train.columns:
            continue
        column = train.series(f.name)
        if not pd.api.types.is_float_dtype(column) or len(column) < 2:
            continue  # the dtype expectation reports it
        y = column.to_numpy(dtype=np.float64)
        if not np.isfinite(y).all():
            continue  # `finite` reports it
        mean, std = float(y.mean()), float(y.std(ddof=1))
        if mean_lo <= mean <= mean_hi and std_lo <= std <= std_hi:
            continue
        (m_lo, m_hi), (s_lo, s_hi) = quantile_output_bounds(y, q)
        out[f.name] = ((min(mean_lo, m_lo), max(mean_hi, m_hi)), (min(std_lo, s_lo), max(std_hi, s_hi)))
    return out
