"""Expectation suites built from the dataset registry (never hand-copied per dataset).

Every expectation carries `meta = {"check": <id>, "column": <name or None>, ...}`: the check id names what
is tested in our vocabulary (`columns`, `dtype`, `not_null`, `range`, `unseen` ...), and the summary and
tests key on it. Bounds the summary needs to find offending rows (`low`, `high`) travel in meta too.

Speed: on an 11-million-row split Great Expectations' pandas map metrics cost about a second per
column, and `expect_column_values_to_be_between` falls back to a Python loop for float32 columns. Range
and finiteness checks therefore use the aggregate min/max expectations (a vectorised pass each); the
offending rows of a failed range check are found afterwards by `failures.offending_rows`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import great_expectations.expectations as gxe
import numpy as np

from multitab.config.validation import ProcessedConfig, RawConfig
from multitab.datasets.schema import DatasetSchema, Feature, Task

FLOAT32_MAX = float(np.finfo(np.float32).max)
RAW_DTYPES = {"numerical": "float32", "categorical": "int64"}
TASK_DTYPES = {"binary": "int64", "multiclass": "int64", "regression": "float32"}
NormalRange = tuple[tuple[float, float], tuple[float, float]]  # (mean range, standard deviation range)


def _meta(check: str, column: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"check": check, "column": column, **extra}


def _table(
    columns: Sequence[str], rows: tuple[int, int | None], train_columns: Sequence[str] | None
) -> list[gxe.Expectation]:
    lo, hi = rows
    out: list[gxe.Expectation] = [
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(columns), meta=_meta("columns")),
        gxe.ExpectTableRowCountToBeBetween(min_value=lo, max_value=hi, meta=_meta("rows")),
    ]
    if train_columns is not None:
        out.append(
            gxe.ExpectTableColumnsToMatchOrderedList(
                column_list=list(train_columns), meta=_meta("same_columns_as_train")
            )
        )
    return out


def _column_basics(column: str, dtype: str, *, missing: bool = False) -> list[gxe.Expectation]:
    """dtype and, unless `missing` values are expected (a feature preprocess fills), not null."""
    out: list[gxe.Expectation] = [
        gxe.ExpectColumnValuesToBeOfType(column=column, type_=dtype, meta=_meta("dtype", column))]
    if not missing:
        out.append(gxe.ExpectColumnValuesToNotBeNull(column=column, meta=_meta("not_null", column)))
    return out


def _bounded(check: str, column: str, low: float, high: float) -> list[gxe.Expectation]:
    """All values in [low, high] via the column's min and max (fast; see the module docstring)."""
    meta = _meta(check, column, low=low, high=high)
    return [
        gxe.ExpectColumnMinToBeBetween(column=column, min_value=low, max_value=high, meta=meta),
        gxe.ExpectColumnMaxToBeBetween(column=column, min_value=low, max_value=high, meta=meta),
    ]


def _finite(column: str) -> list[gxe.Expectation]:
    # NaN is `not_null`'s business; +-inf (and float32 overflow) fail these bounds.
    return _bounded("finite", column, -FLOAT32_MAX, FLOAT32_MAX)


def _not_constant(column: str) -> gxe.Expectation:
    return gxe.ExpectColumnStdevToBeBetween(
        column=column, min_value=0.0, strict_min=True, meta=_meta("constant", column)
    )


def _class_balance(task: Task, n_rows: int, cfg: RawConfig) -> list[gxe.Expectation]:
    if task.class_ratio is None:
        return []
    shares = [r / sum(task.class_ratio) for r in task.class_ratio]
    cb = cfg.class_balance
    if task.type == "binary":
        p = shares[1]
        se = math.sqrt(p * (1 - p) / max(n_rows, 1))
        # Relative for a rare class: 2 % around 0.07 % would accept a task with no positive at all.
        d = max(min(cb.tolerance, cb.relative * min(p, 1 - p)), cb.z * se)
        lo, hi = max(0.0, p - d), min(1.0, p + d)
        return [
            gxe.ExpectColumnMeanToBeBetween(
                column=task.name,
                min_value=lo,
                max_value=hi,
                meta=_meta("class_balance", task.name, expected_share=round(p, 6)),
                notes=f"positive share of '{task.name}' near the paper's Table 1 ({100 * p:.2f}%)",
            )
        ]
    return [
        gxe.ExpectColumnKLDivergenceToBeLessThan(
            column=task.name,
            partition_object={"values": list(range(len(shares))), "weights": shares},
            threshold=cb.multiclass_max_kl,
            meta=_meta("class_balance", task.name, expected_shares=[round(s, 6) for s in shares]),
            notes=f"class shares of '{task.name}' near the paper's Table 1",
        )
    ]


def _labels(task: Task) -> list[gxe.Expectation]:
    if task.type == "regression":
        return _finite(task.name) + [_not_constant(task.name)]
    n = 2 if task.type == "binary" else task.n_classes
    assert n is not None, f"multiclass task {task.name} without n_classes"
    return [
        gxe.ExpectColumnValuesToBeInSet(
            column=task.name, value_set=list(range(n)), meta=_meta("labels", task.name)
        )
    ]


def tolerated_share(rate: float, n_rows: int, z: float) -> float:
    """The share of a split's `n_rows` rows that may hold a value unseen in train when train predicts `rate`: the
    count a binomial sample of `n_rows` rows at that rate stays below but for `z` standard deviations (at most 1).
    One unseen value in a 20-row split is what sampling gives (1 % of 20 rows is 0.2, plus 4 x 0.44)."""
    if n_rows <= 0:
        return rate
    return min(1.0, (n_rows * rate + z * math.sqrt(n_rows * rate * (1.0 - rate))) / n_rows)


def _raw_feature(
    f: Feature,
    split: str,
    cfg: RawConfig,
    train_values: Sequence[int] | None,
    train_range: tuple[int, int] | None = None,
    unseen_id_rate: float | None = None,
    n_rows: int = 0,
) -> list[gxe.Expectation]:
    out = _column_basics(f.name, RAW_DTYPES[f.kind], missing=f.imputed)
    if f.kind == "numerical":
        if f.low is not None and f.high is not None:
            m = cfg.range_margin * (f.high - f.low)
            out += _bounded("range", f.name, f.low - m, f.high + m)
        else:
            out += _finite(f.name)
        if split == "train":
            # A feature is constant if train says so (the model learns from train). In val/test it is
            # sampling: a real 100-row sample's 10-row val split held one value of a column that is rarely
            # non-zero. Regression targets stay checked in every split (explained variance divides by it).
            out.append(_not_constant(f.name))
        return out
    # Categorical: the schema's known codes (or non-negative codes), at most its cardinality in train;
    # in val/test, values unseen in train up to the tolerated fraction of rows.
    # Id-like columns (guessed cardinality) and a declared dataset's columns tolerate unseen values up to the rate
    # train predicts (validate.unseen_rates); columns with published codes `unseen_max_fraction`; either plus what
    # sampling adds on the split's rows (`tolerated_share`).
    rate = cfg.unseen_max_fraction if unseen_id_rate is None else unseen_id_rate
    unseen = tolerated_share(rate, n_rows, cfg.class_balance.z)
    if f.cardinality_is_estimate:
        # A guessed cardinality is no limit: codes are non-negative, val/test codes within train's range
        # (group unseen_ids); more distinct values in train than the guess is only a warning (estimates).
        out += _bounded("code_range", f.name, 0, FLOAT32_MAX)
        if split != "train" and train_range is not None:
            lo, hi = train_range
            out.append(
                gxe.ExpectColumnValuesToBeBetween(
                    column=f.name,
                    min_value=lo,
                    max_value=hi,
                    mostly=1.0 - unseen,
                    meta=_meta("code_range", f.name, low=lo, high=hi),
                    notes=f"ids within train's range [{lo}, {hi}]: at most {100 * unseen:.3g}% of rows "
                    "outside (ids unseen in train map to the reserved index 0)",
                )
            )
    else:
        low = f.low if f.low is not None else 0
        high = f.high if f.high is not None else (f.cardinality - 1 if f.cardinality else FLOAT32_MAX)
        out += _bounded("range", f.name, low, high)
    if split == "train" and f.cardinality:
        out.append(
            gxe.ExpectColumnUniqueValueCountToBeBetween(
                column=f.name,
                min_value=1,
                max_value=int(f.cardinality * cfg.max_cardinality_factor),
                meta=_meta("cardinality" if f.cardinality_is_estimate else "known_cardinality", f.name),
                notes=(
                    f"the schema's cardinality {f.cardinality} is an estimate (not published)"
                    if f.cardinality_is_estimate
                    else None
                ),
            )
        )
    if split != "train" and train_values is not None:
        out.append(
            gxe.ExpectColumnValuesToBeInSet(
                column=f.name,
                value_set=list(train_values),
                mostly=1.0 - unseen,
                meta=_meta("unseen_id" if f.cardinality_is_estimate else "unseen", f.name),
                notes=f"values never seen in train: at most {100 * unseen:.3g}% of rows ({100 * rate:.3g}%"
                + (", the rate train predicts" if unseen_id_rate is not None else "")
                + f", and sampling on {n_rows} rows)",
            )
        )
    return out


def raw_suite(
    schema: DatasetSchema,
    split: str,
    cfg: RawConfig,
    *,
    rows: tuple[int, int | None],
    n_rows: int,
    train_columns: Sequence[str] | None = None,
    train_values: Mapping[str, Sequence[int]] | None = None,
    train_ranges: Mapping[str, tuple[int, int]] | None = None,
    unseen_id_rates: Mapping[str, float] | None = None,
) -> list[gxe.Expectation]:
    """Expectations for a canonical split file (data/splits/<D>/<split>.parquet).

    rows: allowed row count range; n_rows: the split's actual rows (sets the class-balance tolerance);
    train_columns / train_values / train_ranges: train's column list, categorical values and code ranges
    (for val and test); unseen_id_rates: the rate of values unseen in train that train predicts, per id-like
    column (every categorical column of a declared dataset)."""
    out = _table(schema.canonical_columns, rows, train_columns)
    for f in schema.features:
        out += _raw_feature(
            f, split, cfg, (train_values or {}).get(f.name), (train_ranges or {}).get(f.name),
            (unseen_id_rates or {}).get(f.name), n_rows,
        )
    for t in schema.tasks:
        out += _column_basics(t.name, TASK_DTYPES[t.type])
        out += _labels(t)
        out += _class_balance(t, n_rows, cfg)
        if t.type == "binary":
            # A binary task without a single positive in a split cannot be trained or scored (AUC): a fact.
            out.append(
                gxe.ExpectColumnMaxToBeBetween(
                    column=t.name, min_value=1, max_value=1, meta=_meta("positives", t.name),
                    notes=f"'{t.name}' needs at least one positive row in every split",
                )
            )
    return out


def processed_suite(
    schema: DatasetSchema,
    split: str,
    cfg: ProcessedConfig,
    *,
    n_rows: int,
    train_columns: Sequence[str] | None = None,
    standard_targets: bool = True,
    widened: Mapping[str, NormalRange] | None = None,
) -> list[gxe.Expectation]:
    """Expectations for a processed split (data/processed/<D>/<split>.parquet, schema from meta.json,
    whose categorical cardinalities include the reserved index 0 for values unseen in train).
    Regression targets are checked for mean 0 / std 1 on train only if standardised
    (`standard_targets`: meta.json's target_transform; raw targets keep their own scale). `widened`: a column's
    (mean, standard deviation) ranges where they are wider than `cfg`'s (what the quantile map can give on train:
    normal_bounds)."""
    out = _table(schema.canonical_columns, (n_rows, n_rows), train_columns)
    normal = split == "train"
    for f in schema.features:
        if f.kind == "numerical":
            out += _column_basics(f.name, "float32") + _finite(f.name)
            if normal:
                out += _standard_normal(f.name, cfg, (widened or {}).get(f.name))
        else:
            if not f.cardinality:
                raise ValueError(f"meta.json: categorical feature {f.name!r} has no cardinality")
            out += _column_basics(f.name, "int64") + _bounded("codes", f.name, 0, f.cardinality - 1)
    for t in schema.tasks:
        out += _column_basics(t.name, TASK_DTYPES[t.type]) + _labels(t)
        if t.type == "regression" and normal and standard_targets:
            out += _standard_normal(t.name, cfg)
    return out


def normal_ranges(cfg: ProcessedConfig) -> NormalRange:
    """The configured (mean, standard deviation) ranges of a standard-normal training column."""
    tol = cfg.normal_mean_tolerance
    return (-tol, tol), (cfg.normal_std_low, cfg.normal_std_high)


def _standard_normal(column: str, cfg: ProcessedConfig, widened: NormalRange | None = None) -> list[gxe.Expectation]:
    (mean_lo, mean_hi), (std_lo, std_hi) = widened or normal_ranges(cfg)
    why = ("validation.processed's range widened to what the quantile map can give on train (its rows, quantiles "
           "and ties)" if widened else None)
    return [
        gxe.ExpectColumnMeanToBeBetween(
            column=column, min_value=mean_lo, max_value=mean_hi, meta=_meta("normal_mean", column), notes=why
        ),
        gxe.ExpectColumnStdevToBeBetween(
            column=column, min_value=std_lo, max_value=std_hi, meta=_meta("normal_std", column), notes=why
        ),
    ]
