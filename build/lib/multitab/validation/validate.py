"""The two validations of the pipeline: `validate_raw` (canonical split files, before preprocessing) and
`validate_processed` (processed splits and MultiTab-Bench outputs, before training)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from multitab.config.data import DatasetConfig
from multitab.config.validation import RawConfig, ValidationConfig
from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.io import read_json, sha256_file
from multitab.validation import suites
from multitab.validation.expectations import (
    ExpectColumnClassesToOccurInSomeSplit,
    ExpectColumnValuesToBeWithinTrainBounds,
    ExpectTableRowsToBeUnique,
    ExpectTableRowsToNotBeInTrain,
    OwnCheck,
    counted,
)
from multitab.validation.failures import Failure, Outcome
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
    if sp.method == "official_test":
        n_train_file = totals["train"] if totals else observed["train"] + observed["val"]
        n_val = sp.val_fraction * n_train_file
        want: dict[str, float | None] = {
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


def _read_splits(folder: Path, stage: str) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    frames, inputs = {}, {}
    for split in SPLITS:
        path = folder / f"{split}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{stage}: {path} not found; run the stage that writes {folder} first")
        frames[split] = pd.read_parquet(path)
        inputs[path.name] = sha256_file(path)
    return frames, inputs


def _train_values(
    schema: DatasetSchema, train: pd.DataFrame, min_rows_per_value: float
) -> dict[str, list[int]]:
    """The values of each categorical feature seen in train (integer columns only), for the columns where
    train has enough rows per value for "unseen in train" to mean something."""
    out = {}
    for f in schema.features:
        if f.kind != "categorical" or f.name not in train.columns:
            continue
        if not pd.api.types.is_integer_dtype(train[f.name]):
            continue  # the dtype expectation reports it
        values = np.unique(train[f.name].to_numpy())
        if len(train) >= min_rows_per_value * len(values):
            out[f.name] = values.tolist()
        else:
            log.info(
                "%s: %d values on %d train rows: unseen-in-train check skipped",
                f.name,
                len(values),
                len(train),
            )
    return out


def _train_ranges(
    schema: DatasetSchema, train: pd.DataFrame, min_rows_per_value: float
) -> dict[str, tuple[int, int]]:
    """Train's code range of each categorical feature whose cardinality is only an estimate, where train
    has enough rows per value for a code outside that range to mean something (as `_train_values`)."""
    out = {}
    for f in schema.features:
        if f.cardinality_is_estimate and f.name in train.columns and len(train):
            if pd.api.types.is_integer_dtype(train[f.name]):
                col = train[f.name].to_numpy()
                if len(train) >= min_rows_per_value * len(np.unique(col)):
                    out[f.name] = (int(col.min()), int(col.max()))
    return out


def unseen_id_rates(schema: DatasetSchema, train: pd.DataFrame, raw: RawConfig) -> dict[str, float]:
    """The share of val/test rows tolerated with an id unseen in train, per id-like column (the schema's
    estimated cardinalities): `unseen_ids_factor` times the Good-Turing estimate of the chance that a new
    row holds an unseen id (the share of train rows whose id occurs once in train), at least
    `unseen_max_fraction`, at most 1."""
    out = {}
    for f in schema.features:
        if not f.cardinality_is_estimate or f.name not in train.columns or not len(train):
            continue
        counts = train[f.name].value_counts(dropna=True)
        once = float((counts == 1).sum()) / len(train)
        out[f.name] = min(1.0, max(raw.unseen_max_fraction, raw.unseen_ids_factor * once))
    return out


def _row_hashes(frame: pd.DataFrame) -> np.ndarray:
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def _rows_text(frame: pd.DataFrame, idx: np.ndarray, k: int) -> tuple[tuple[int, object], ...]:
    col = frame.columns[0] if len(frame.columns) else None
    return tuple((int(i), frame[col].iloc[int(i)] if col is not None else None) for i in idx[:k])


def _absent_classes(schema: DatasetSchema, frames: Mapping[str, pd.DataFrame]) -> dict[str, list[int]]:
    """Multiclass task -> the classes (0..n-1) that occur in no split (integer label columns only: the
    dtype expectation reports others)."""
    out = {}
    for t in schema.tasks:
        if t.type != "multiclass" or not t.n_classes:
            continue
        seen: set[int] = set()
        for frame in frames.values():
            if t.name in frame.columns and pd.api.types.is_integer_dtype(frame[t.name]):
                seen.update(int(v) for v in np.unique(frame[t.name].to_numpy()))
            else:
                return {}
        missing = [c for c in range(t.n_classes) if c not in seen]
        if missing:
            out[t.name] = missing
    return out


def _target_bounds(
    schema: DatasetSchema, train: pd.DataFrame | None, raw: RawConfig
) -> dict[str, tuple[float, float]]:
    """Regression task -> robust bounds from train: its 1-99 % quantile range widened `target_spread_factor`
    times its width, within the task's published bounds."""
    bounds = {}
    for t in schema.tasks:
        if t.type != "regression" or train is None or t.name not in train.columns or not len(train):
            continue
        y = pd.to_numeric(train[t.name], errors="coerce").to_numpy(np.float64)
        y = y[np.isfinite(y)]
        if not len(y):
            continue
        q01, q99 = np.quantile(y, [0.01, 0.99])
        spread = raw.target_spread_factor * max(q99 - q01, 1e-12)
        lo, hi = q01 - spread, q99 + spread
        lo = max(lo, t.low) if t.low is not None else lo
        hi = min(hi, t.high) if t.high is not None else hi
        bounds[t.name] = (float(lo), float(hi))
    return bounds


def _rows_check(
    expectation: ExpectTableRowsToBeUnique | ExpectTableRowsToNotBeInTrain,
    split: str,
    frame: pd.DataFrame,
    bad: np.ndarray,
    what: str,
    why: str,
    k: int,
) -> OwnCheck:
    """A check of whole rows, `bad` the offending row numbers: failed beyond the tolerated share of rows,
    saying "<n> of <rows> rows <what> (<share>): <why>"."""
    n, tolerated = len(frame), expectation.max_fraction
    failure = None
    if n and len(bad) > tolerated * n:
        share = f"{100 * len(bad) / n:.3g}%, tolerated {100 * tolerated:g}%"
        failure = Failure(
            split, None, (expectation.meta or {})["check"], expectation.title,
            f"{len(bad)} of {n} rows {what} ({share}): {why}", _rows_text(frame, bad, k),
        )  # fmt: skip
    return OwnCheck(expectation, counted(n, bad, k), failure)


def _class_absent_check(schema: DatasetSchema, task: str, missing: list[int]) -> OwnCheck:
    """A multiclass task with classes in no split (`_absent_classes`): a failed check of train."""
    title = ExpectColumnClassesToOccurInSomeSplit.title
    n_classes = schema.task(task).n_classes or 0
    expectation = ExpectColumnClassesToOccurInSomeSplit(
        column=task,
        n_classes=n_classes,
        meta={"check": "class_absent", "column": task},
        description=f"{title}: each of the {n_classes} classes of '{task}' occurs in train, val or test",
    )
    failure = Failure(
        "train", task, "class_absent", title,
        f"class(es) {missing} of '{task}' occur in no split (train, val or test): the model cannot learn "
        "them and their one-vs-rest AUC is undefined; use a larger sample",
    )  # fmt: skip
    return OwnCheck(expectation, {"observed_value": {"absent_classes": missing}}, failure)


def _target_range_check(
    schema: DatasetSchema, split: str, frame: pd.DataFrame, task: str, bounds: tuple[float, float],
    raw: RawConfig, k: int,
) -> OwnCheck:  # fmt: skip
    """Every finite value of regression task `task` within `bounds` (`_target_bounds`)."""
    lo, hi = bounds
    title = ExpectColumnValuesToBeWithinTrainBounds.title
    y = pd.to_numeric(frame[task], errors="coerce").to_numpy(np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(np.isfinite(y) & ((y < lo) | (y > hi)))
    failure = None
    if len(bad):
        published = any(t.name == task and (t.low is not None or t.high is not None) for t in schema.tasks)
        failure = Failure(
            split, task, "target_range", title,
            f"{len(bad)} of {len(frame)} values outside [{lo:.4g}, {hi:.4g}] (train's 1-99 % quantile range "
            f"widened {raw.target_spread_factor:g} times its width"
            + (", and the published bounds" if published else "")
            + "): wrong units or a scaled column?",
            tuple((int(i), frame[task].iloc[int(i)]) for i in bad[:k]),
        )  # fmt: skip
    expectation = ExpectColumnValuesToBeWithinTrainBounds(
        column=task,
        min_value=lo,
        max_value=hi,
        meta={"check": "target_range", "column": task},
        description=f"{title}: every finite value in [{lo:.4g}, {hi:.4g}]",
    )
    return OwnCheck(expectation, counted(len(frame), bad, k, y[bad]), failure)


def extra_checks(
    schema: DatasetSchema, frames: Mapping[str, pd.DataFrame], cfg: ValidationConfig
) -> dict[str, list[OwnCheck]]:
    """Checks outside Great Expectations' engine (numpy, one pass each; expectations.py): duplicate rows
    within a split, val/test rows identical to a train row (leakage), every class of a multiclass task in
    some split, regression targets within robust bounds of train. Split -> its checks, passed or failed."""
    k = cfg.report.offending_rows
    raw = cfg.raw
    hashes = {s: _row_hashes(f) for s, f in frames.items()}
    train_set = np.unique(hashes["train"]) if "train" in hashes else np.zeros(0, np.uint64)
    bounds = _target_bounds(schema, frames.get("train"), raw)
    # Survey microdata repeats people by nature (schema.records_repeat): judge repeats against its own rate.
    dup_max, overlap_max = (
        (raw.repeated_records_max_fraction,) * 2
        if schema.records_repeat
        else (raw.duplicates_max_fraction, raw.overlap_max_fraction)
    )
    nature = (
        f"{schema.name}'s records repeat by nature (survey microdata), but not this often"
        if schema.records_repeat
        else None
    )
    absent = _absent_classes(schema, frames)
    out: dict[str, list[OwnCheck]] = {}
    for split, frame in frames.items():
        h = hashes[split]
        duplicates = ExpectTableRowsToBeUnique(
            max_fraction=dup_max,
            meta={"check": "duplicates", "column": None},
            description=f"{ExpectTableRowsToBeUnique.title}: at most {100 * dup_max:g}% of rows repeat an "
            "earlier row of the split",
        )
        checks = [
            _rows_check(
                duplicates, split, frame, np.flatnonzero(pd.Series(h).duplicated().to_numpy()),
                "repeat an earlier row of the split",
                (nature or "the file holds copied rows") + " (or is it concatenated with itself?)",
                k,
            )
        ]  # fmt: skip
        if split != "train":
            overlap = ExpectTableRowsToNotBeInTrain(
                max_fraction=overlap_max,
                meta={"check": "overlap", "column": None},
                description=f"{ExpectTableRowsToNotBeInTrain.title}: at most {100 * overlap_max:g}% of rows "
                "identical to a train row",
            )
            checks.append(
                _rows_check(
                    overlap, split, frame, np.flatnonzero(np.isin(h, train_set)),
                    "are identical to a train row",
                    "they leak between the splits; " + (f"{nature}; " if nature else "")
                    + "remove duplicate rows from the source file",
                    k,
                )
            )  # fmt: skip
        if split == "train":
            checks += [_class_absent_check(schema, task, missing) for task, missing in absent.items()]
        checks += [
            _target_range_check(schema, split, frame, task, b, raw, k)
            for task, b in bounds.items()
            if task in frame.columns
        ]
        out[split] = checks
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
) -> Outcome:
    """Validate data/splits/<D>/{train,val,test}.parquet against the schema's raw suite (and the checks of
    `extra_checks`); keep the validation results of the newest `keep_runs` runs."""
    splits_dir = Path(splits_dir)
    frames, inputs = _read_splits(splits_dir, "validate_raw")
    rows = expected_rows(schema, data, cfg.raw.row_count_slack, {s: len(f) for s, f in frames.items()})
    train = frames["train"]
    values = _train_values(schema, train, cfg.raw.unseen_min_rows_per_value)
    ranges = _train_ranges(schema, train, cfg.raw.unseen_min_rows_per_value)
    id_rates = unseen_id_rates(schema, train, cfg.raw)
    built = {
        split: suites.raw_suite(
            schema,
            split,
            cfg.raw,
            rows=rows[split],
            n_rows=len(frame),
            train_columns=None if split == "train" else list(train.columns),
            train_values=None if split == "train" else values,
            train_ranges=None if split == "train" else ranges,
            unseen_id_rates=None if split == "train" else id_rates,
        )
        for split, frame in frames.items()
    }
    extra = extra_checks(schema, frames, cfg)
    policy = cfg.policy_for(schema.name)
    with open_context(context_dir, report_dir) as context:
        return run_suites(
            context,
            stage="validate_raw",
            dataset=schema.name,
            frames=frames,
            suites=built,
            report_dir=report_dir,
            report=cfg.report,
            inputs=inputs,
            extra=extra,
            levels=policy.levels(),
            policy=policy.as_dict(),
            keep_runs=keep_runs,
        )


def validate_processed(
    processed_dir: str | Path,
    cfg: ValidationConfig,
    *,
    context_dir: str | Path,
    report_dir: str | Path,
    keep_runs: int | None = None,
) -> Outcome:
    """Validate data/processed/<D>/ (or a MultiTab-Bench output folder) against its meta.json; keep the
    validation results of the newest `keep_runs` runs."""
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
    frames, inputs = _read_splits(processed_dir, "validate_processed")
    inputs[meta_path.name] = sha256_file(meta_path)
    train_columns = list(frames["train"].columns)
    built = {
        split: suites.processed_suite(
            schema,
            split,
            cfg.processed,
            n_rows=int(n_rows[split]),
            train_columns=None if split == "train" else train_columns,
            standard_targets=meta.get("target_transform", "standard") == "standard",
        )
        for split in frames
    }
    with open_context(context_dir, report_dir) as context:
        return run_suites(
            context,
            stage="validate_processed",
            dataset=schema.name,
            frames=frames,
            suites=built,
            report_dir=report_dir,
            report=cfg.report,
            inputs=inputs,
            keep_runs=keep_runs,
        )
