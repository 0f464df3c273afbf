"""params.yaml `validation`: the thresholds and per-dataset policy of validate_raw@D / validate_processed@D."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from multitab.config._build import bounded


@dataclass(frozen=True)
class ClassBalanceConfig:
    # A binary label's positive share must lie within Table 1's share ± max(tolerance, z * standard error
    # of a share estimated on the split's n rows): tight on large splits, no false alarms on small ones.
    # For a rare class the tolerance is relative: at most `relative` times the rarer share (conversion's
    # 0.07 % gets +-0.035 % plus the sampling term, not +-2 %).
    tolerance: float = field(metadata=bounded(ge=0.0, le=1.0))
    z: float = field(metadata=bounded(ge=0.0))
    # Multiclass labels: KL divergence of the observed class shares from Table 1's at most this.
    multiclass_max_kl: float = field(metadata=bounded(ge=0.0))
    relative: float = field(default=0.5, metadata=bounded(ge=0.0))


@dataclass(frozen=True)
class RawConfig:
    # Split sizes are fractions of a row count: allow this many rows either way for rounding.
    row_count_slack: int = field(metadata=bounded(ge=0))
    # Numerical features: plausible range = the schema's [low, high] widened by this fraction of its
    # width on each side (real data has tails the schema's round numbers do not quite cover).
    range_margin: float = field(metadata=bounded(ge=0.0))
    # Categorical features may take at most cardinality * this many distinct values in train
    # (the schema's cardinalities of AliExpress are guesses: raise this for real AliExpress files).
    max_cardinality_factor: float = field(metadata=bounded(gt=0.0))
    # val/test values of a categorical feature never seen in train: at most this fraction of rows.
    unseen_max_fraction: float = field(metadata=bounded(ge=0.0, le=1.0))
    # ... checked only where train holds at least this many rows per distinct value: with fewer, values
    # unseen in train are what sampling gives (a 5,000-value column on a few thousand stand-in rows).
    unseen_min_rows_per_value: float = field(metadata=bounded(ge=0.0))
    class_balance: ClassBalanceConfig
    # Rows that occur more than once within a split, and val/test rows identical to a train row (features
    # and labels): at most this fraction of the split's rows (a file copied twice gives 50 %).
    duplicates_max_fraction: float = field(default=0.01, metadata=bounded(ge=0.0, le=1.0))
    overlap_max_fraction: float = field(default=0.01, metadata=bounded(ge=0.0, le=1.0))
    # ... for a dataset whose records repeat by nature (the schema's `records_repeat`: survey microdata),
    # both at most this fraction instead: far above the natural repeats, below a copied file's 50 %.
    repeated_records_max_fraction: float = field(default=0.3, metadata=bounded(ge=0.0, le=1.0))
    # Id-like categorical columns (the schema's estimated cardinalities): val/test rows with an id unseen in
    # train (or outside train's code range) are tolerated up to this factor times the rate train predicts
    # (the Good-Turing estimate: the share of train rows whose value occurs once), and at least
    # `unseen_max_fraction`.
    unseen_ids_factor: float = field(default=2.0, metadata=bounded(ge=0.0))
    # Regression targets: every value within [q01 - k * (q99 - q01), q99 + k * (q99 - q01)] of train
    # (robust: a handful of rows cannot move the bounds) and the published bounds where there are some.
    target_spread_factor: float = field(default=50.0, metadata=bounded(gt=0.0))


Level = Literal["error", "warn"]


@dataclass(frozen=True)
class ProcessedConfig:
    # Quantile-transformed (and standardised regression) columns on train: |mean| <= mean_tolerance,
    # std within [std_low, std_high]; a quantile-transformed column outside them is judged by what the transform can
    # give on the training split's rows, quantiles and ties instead, where that is wider (validation/normal_bounds.py).
    normal_mean_tolerance: float
    normal_std_low: float
    normal_std_high: float
    # Per dataset (or MultiTab-Bench folder): what a failed check of the training columns' distribution
    # (normal_mean, normal_std) does: error (the default: no verdict, the branch stops) or warn (passes, reported).
    policy: dict[str, Level] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportConfig:
    offending_rows: int = field(metadata=bounded(ge=0))  # rows shown per failed expectation (summary and Data Docs)
    # failed expectations listed in the printed summary (all are in Data Docs)
    max_failures: int = field(metadata=bounded(ge=1))
    keep_runs: int = field(default=10, metadata=bounded(ge=1))  # validation results kept per suite: the newest runs'


# Check id (suites.py, validate.py) -> policy group. Checks of facts (columns, dtypes, labels, missing
# values, finiteness, a task without a positive in a split ...) are in no group: they always fail.
CHECK_GROUPS = {
    "class_balance": "class_balance",
    "range": "ranges",
    "target_range": "ranges",
    "unseen": "categories",
    "unseen_id": "unseen_ids",
    "code_range": "unseen_ids",
    "class_absent": "class_balance",
    "cardinality": "estimates",
    "duplicates": "duplicates",
    "overlap": "duplicates",
    "rows": "rows",
}
# validate_processed's checks of estimates: the training columns' distribution (validation.processed.policy.<D>)
PROCESSED_CHECKS = ("normal_mean", "normal_std")


@dataclass(frozen=True)
class PolicyConfig:
    """What a failed check of each group does for one dataset: `error` fails validate_raw (no verdict, the
    branch stops), `warn` lets it pass and reports it (verdict, Data Docs index, the report's banner)."""

    class_balance: Level = "error"  # Table 1's class shares, a class absent from every split (samples differ)
    ranges: Level = "error"  # plausible ranges of numerical features and regression targets
    categories: Level = "error"  # val/test values of a categorical column with published codes unseen in train
    # val/test ids of an id-like column (estimated cardinality) unseen in train or outside train's code range,
    # beyond the rate train predicts: a warning by default (they map to the reserved index 0)
    unseen_ids: Level = "warn"
    duplicates: Level = "error"  # duplicate rows within a split, val/test rows also in train
    rows: Level = "error"  # row counts against the release's published counts (remote) or params
    estimates: Level = "warn"  # the schema's guessed cardinalities (AliExpress): never a hard limit

    def levels(self) -> dict[str, str]:
        """Check id -> level for every check the policy covers."""
        return {check: getattr(self, group) for check, group in CHECK_GROUPS.items()}

    def as_dict(self) -> dict[str, str]:
        return {g: getattr(self, g) for g in sorted(set(CHECK_GROUPS.values()))}


@dataclass(frozen=True)
class ValidationConfig:
    raw: RawConfig
    processed: ProcessedConfig
    report: ReportConfig
    # the policy of a dataset without an entry in `policy`
    default_policy: PolicyConfig
    # Per dataset: every check group's level
    policy: dict[str, PolicyConfig] = field(default_factory=dict)

    def policy_for(self, dataset: str) -> PolicyConfig:
        return self.policy.get(dataset, self.default_policy)
