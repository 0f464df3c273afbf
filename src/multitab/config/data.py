"""params.yaml `datasets.<name>`: where the raw data comes from, how it is split and preprocessed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from multitab.config._build import ValueProblem, bounded, optional

SplitMethod = Literal["official_test", "shuffle", "ordered", "stratified"]


@dataclass(frozen=True)
class SplitOverride:
    """Split settings that protocol `authors_code` puts in place of the ones beside it (null: keep)."""

    method: SplitMethod | None = field(default=None, metadata=optional("the split's own"))
    seed: int | None = field(default=None, metadata={**bounded(ge=0), **optional("the split's own")})
    val_fraction: float | None = field(default=None,
                                       metadata={**bounded(ge=0.0, lt=1.0), **optional("the split's own")})
    test_fraction: float | None = field(default=None,
                                        metadata={**bounded(ge=0.0, lt=1.0), **optional("the split's own")})


@dataclass(frozen=True)
class StandinConfig:
    rows: dict[str, int]  # rows per raw file (AliExpress: train, test; others: data)
    seed: int = field(metadata=bounded(ge=0))

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.rows.items() if v < 1}
        if bad:
            raise ValueProblem(f"rows: {bad}: every raw file needs at least 1 row")


@dataclass(frozen=True)
class LocalConfig:
    # A file (CSV, gzipped CSV, Parquet or ARFF), a folder, or a .zip / .tar.gz; for datasets with several
    # raw files (AliExpress) a folder or archive holding train.* and test.*. Relative paths are relative to
    # the repository root. dvc.yaml makes it a dependency of acquire@D (params.yaml's default: local/<D>/).
    path: str | None = None


@dataclass(frozen=True)
class RemoteConfig:
    url: str | None = None
    sha256: str | None = None  # checksum of the downloaded file; None = verify nothing (not recommended)
    format: Literal["csv", "csv.gz", "parquet", "arff", "zip", "tar.gz"] = "csv.gz"
    retries: int = field(default=5, metadata=bounded(ge=0))
    backoff_seconds: float = field(default=2.0, metadata=bounded(ge=0.0))
    timeout_seconds: float = field(default=60.0, metadata=bounded(gt=0.0))


@dataclass(frozen=True)
class SplitConfig:
    # official_test: keep the source's train/test files, validation = stratified val_fraction of train;
    # shuffle: random val_fraction / test_fraction of all rows; ordered: first val_fraction rows are
    # validation, last test_fraction rows are test (Higgs, as in prior work); stratified: a random split
    # stratified on the classification labels (scikit-learn's train_test_split, train vs val + test,
    # then val vs test, both with `seed`: the authors' notebook's Higgs split).
    method: SplitMethod
    seed: int = field(metadata=bounded(ge=0))
    val_fraction: float = field(metadata=bounded(ge=0.0, lt=1.0))
    test_fraction: float = field(default=0.0, metadata={**bounded(ge=0.0, lt=1.0), **optional(
        "official_test: the source's own test file", when=lambda split: split.get("method") == "official_test")})
    # What protocol `authors_code` uses instead (docs/deviations.md); null or absent: the same under both.
    authors_code: SplitOverride | None = field(default=None, metadata=optional("the same split under both protocols"))

    def __post_init__(self) -> None:
        for split in (self, self.authors_code):
            if split is None:
                continue
            val = self.val_fraction if split.val_fraction is None else split.val_fraction
            test = self.test_fraction if split.test_fraction is None else split.test_fraction
            if val + test >= 1.0:
                which = "" if split is self else "authors_code: "
                raise ValueProblem(f"{which}val_fraction {val:g} + test_fraction {test:g} = {val + test:g} "
                                  "leaves no training rows; their sum must be < 1")

    def for_protocol(self, protocol: str) -> SplitConfig:
        """The split settings in effect under `protocol` (without the override field)."""
        base = dataclasses.replace(self, authors_code=None)
        if protocol != "authors_code" or self.authors_code is None:
            return base
        changes = {k: v for k, v in dataclasses.asdict(self.authors_code).items() if v is not None}
        return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class PreprocessConfig:
    numerical: Literal["quantile", "standard", "none"] = "quantile"
    # FT-Transformer's recipe: n_quantiles = max(min(n_train // 30, max_quantiles), 10), output normal,
    # Gaussian noise of relative std `noise` added once to the training features before fitting.
    max_quantiles: int = field(default=1000, metadata=bounded(ge=10))  # the recipe's floor is 10 quantiles
    subsample: int = field(default=1_000_000_000, metadata=bounded(ge=1))
    noise: float = field(default=1e-3, metadata=bounded(ge=0.0))
    seed: int = field(default=0, metadata=bounded(ge=0))
    # Regression targets: raw (the authors' notebook; the paper is silent) or standardised with the
    # training mean and standard deviation. Under both, meta.json's target_stats map predictions back.
    targets: Literal["raw", "standard"] = "raw"


TaskKind = Literal["binary", "multiclass", "regression"]


def _declared(entry: dict[str, object]) -> bool:
    """Whether a `datasets.<name>` mapping declares its dataset (`tasks:`)."""
    return "tasks" in entry


@dataclass(frozen=True)
class FeaturesConfig:
    """A declared dataset's features: the kinds it fixes (the others are inferred: multitab.datasets.infer) and the
    columns it leaves out. Every column of the file that is neither a task nor dropped is a feature."""

    categorical: tuple[str, ...] = field(default=(), metadata=optional("none fixed: inferred from the values"))
    numerical: tuple[str, ...] = field(default=(), metadata=optional("none fixed: inferred from the values"))
    drop: tuple[str, ...] = field(default=(), metadata=optional("no column left out"))
    # A numerical feature's missing cells: filled with the median of its training split's values (fitted on train
    # only, by preprocess@D: val and test rows never move it), or refused by acquire@D naming the column and row.
    missing: Literal["median", "refuse"] = field(default="median", metadata=optional("median (docs/extending.md)"))
    # A feature holding one value in every row of the training split (a sample of a wide table has several): left
    # out by split@D with a logged line naming it (its record's `constant`, the report's "columns left out"), or
    # refused by split@D naming the column.
    constant: Literal["drop", "refuse"] = field(default="drop", metadata=optional("drop (docs/extending.md)"))


@dataclass(frozen=True, kw_only=True)
class DatasetConfig:
    source: Literal["standin", "local", "remote"]
    # A dataset with a schema in the registry has a stand-in and may be downloaded; a declared one is local.
    standin: StandinConfig = field(default_factory=lambda: StandinConfig(rows={}, seed=0),
                                   metadata=optional("a declared dataset has no stand-in", when=_declared))
    local: LocalConfig
    remote: RemoteConfig = field(default_factory=RemoteConfig,
                                 metadata=optional("a declared dataset is read from your files", when=_declared))
    split: SplitConfig
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig, metadata=optional(
        "a declared dataset: the values docs/extending.md lists", when=_declared))
    # A dataset the registry does not know is declared here: task column -> type (multitab.datasets.declared).
    tasks: dict[str, TaskKind] | None = field(default=None, metadata=optional("a dataset of the registry"))
    features: FeaturesConfig | None = field(default=None, metadata=optional("kinds inferred from the values"))

    def __post_init__(self) -> None:
        if self.tasks is None:
            if self.features is not None:
                raise ValueProblem("features: only a declared dataset (one with `tasks:`) lists its features")
            return
        if not self.tasks:
            raise ValueProblem("tasks: declare at least one task column (column: binary|multiclass|regression)")
        if self.source != "local":
            raise ValueProblem(f"source={self.source!r}: a declared dataset (with `tasks:`) is read from your files: "
                               "set source: local and local.path")
        seen: dict[str, str] = {}
        f = self.features or FeaturesConfig()
        for key, names in (("categorical", f.categorical), ("numerical", f.numerical), ("drop", f.drop)):
            for name in names:
                if name in self.tasks:
                    raise ValueProblem(f"features.{key}: column {name!r} is a task (tasks.{name}); a target is "
                                       "never a feature: remove it from features")
                if name in seen:
                    also = "" if seen[name] == key else f" (also in features.{seen[name]})"
                    raise ValueProblem(f"features.{key}: column {name!r} is listed twice{also}; list it once")
                seen[name] = key

    @property
    def declared(self) -> bool:
        """Whether the dataset is described here (tasks, features) rather than by a schema of the registry."""
        return self.tasks is not None
