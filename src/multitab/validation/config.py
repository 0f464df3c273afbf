"""Typed configuration of the validation stages: `params.yaml` → `validation`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from multitab.config import load_params, section


@dataclass(frozen=True)
class ClassBalanceConfig:
    # A binary label's positive share must lie within Table 1's share ± max(tolerance, z * standard error
    # of a share estimated on the split's n rows): tight on large splits, no false alarms on small ones.
    tolerance: float
    z: float
    # Multiclass labels: KL divergence of the observed class shares from Table 1's at most this.
    multiclass_max_kl: float


@dataclass(frozen=True)
class RawConfig:
    # Split sizes are fractions of a row count: allow this many rows either way for rounding.
    row_count_slack: int
    # Numerical features: plausible range = the schema's [low, high] widened by this fraction of its
    # width on each side (real data has tails the schema's round numbers do not quite cover).
    range_margin: float
    # Categorical features may take at most cardinality * this many distinct values in train
    # (the schema's cardinalities of AliExpress are guesses: raise this for real AliExpress files).
    max_cardinality_factor: float
    # val/test values of a categorical feature never seen in train: at most this fraction of rows.
    unseen_max_fraction: float
    # ... checked only where train holds at least this many rows per distinct value: with fewer, values
    # unseen in train are what sampling gives (a 5,000-value column on a few thousand stand-in rows).
    unseen_min_rows_per_value: float
    class_balance: ClassBalanceConfig


@dataclass(frozen=True)
class ProcessedConfig:
    # Quantile-transformed (and standardised regression) columns on train: |mean| <= mean_tolerance,
    # std within [std_low, std_high].
    normal_mean_tolerance: float
    normal_std_low: float
    normal_std_high: float


@dataclass(frozen=True)
class ReportConfig:
    offending_rows: int  # rows shown per failed expectation (summary and Data Docs)
    max_failures: int  # failed expectations listed in the printed summary (all are in Data Docs)


@dataclass(frozen=True)
class ValidationConfig:
    raw: RawConfig
    processed: ProcessedConfig
    report: ReportConfig


def load_validation_config(params_path: str | Path = "params.yaml") -> ValidationConfig:
    return section(load_params(params_path), "validation", ValidationConfig, source=str(params_path))
