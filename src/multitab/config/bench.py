"""params.yaml `bench` (MultiTab-Bench: the synthetic datasets, their training overlay, Figures 3-4) and
`study` (`make study`: Figures 5-6 to convergence over seeds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from multitab.config._build import ConfigError, bounded
from multitab.config.bench_checks import check_int, validate
from multitab.config.data import SplitConfig
from multitab.files.yaml_data import short_repr

Group = Literal["correlation", "complexity", "count", "nonuniform"]


@dataclass(frozen=True)
class BenchDataConfig:
    """Settings shared by every MultiTab-Bench dataset (paper: 1,000,000 samples, 32 features, noise 0.01)."""

    n_samples: int
    n_features: int
    noise: float
    split: SplitConfig
    # Regression targets raw (default: the authors' code) or standardised with train statistics.
    targets: Literal["raw", "standard"] = "raw"

    def __post_init__(self) -> None:
        try:
            validate(self.n_samples, self.n_features, 0.0, [1], self.noise, 0)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bench.data: {e}") from None


@dataclass(frozen=True)
class BenchDatasetConfig:
    """One dataset. `groups`: the variations of the paper it belongs to (Figure 5: correlation, complexity,
    count; Figure 6: nonuniform); the varied factor is read from its own fields: correlation (p), complexity
    (degrees), count (len(degrees)). One dataset may serve several groups (p 0.6, PD [3,3,3], t 3)."""

    groups: tuple[Group, ...]
    correlation: float
    degrees: tuple[int, ...]
    seed: int

    @property
    def n_tasks(self) -> int:
        return len(self.degrees)


@dataclass(frozen=True)
class LabelCorrelationConfig:
    """Figures 3 and 4: `n_datasets` datasets of `n_samples` rows per p on a grid of `grid_points` points
    from 0 to 1. Figure 3: PD = [k] * t for k in `figure3_degrees`, t in `figure3_n_tasks`; Figure 4: each
    degree list of `figure4_degrees`."""

    n_datasets: int
    n_samples: int
    n_features: int
    noise: float
    grid_points: int
    seed: int
    figure3_degrees: tuple[int, ...]
    figure3_n_tasks: tuple[int, ...]
    figure4_degrees: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        try:
            check_int("n_datasets", self.n_datasets, 2)
            check_int("grid_points", self.grid_points, 2)
            all_degrees = [[k] * t for k in self.figure3_degrees for t in self.figure3_n_tasks] + [
                list(d) for d in self.figure4_degrees
            ]
            for degrees in all_degrees:
                if len(degrees) < 2:
                    raise ValueError(f"degrees={degrees}: label correlations need at least two tasks")
                validate(self.n_samples, self.n_features, 0.0, degrees, self.noise, self.seed)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bench.label_correlations: {e}") from None

    @property
    def grid(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, check_int("grid_points", self.grid_points, 2))


@dataclass(frozen=True)
class BenchConfig:
    data: BenchDataConfig
    configs: dict[str, BenchDatasetConfig]
    label_correlations: LabelCorrelationConfig

    def __post_init__(self) -> None:
        for name, cfg in self.configs.items():
            try:
                if not cfg.groups:
                    raise ValueError("groups=[] must name at least one variation")
                validate(self.data.n_samples, self.data.n_features, cfg.correlation, cfg.degrees,
                         self.data.noise, cfg.seed)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"bench.configs.{name}: {e}") from None

    def dataset(self, name: str) -> BenchDatasetConfig:
        """`bench.configs.<name>`; an unknown name fails naming the known ones."""
        if name not in self.configs:
            raise ConfigError(f"no MultiTab-Bench config {name!r} under bench.configs; known: {sorted(self.configs)}")
        return self.configs[name]


@dataclass(frozen=True)
class ClaimConfig:
    """The paper's claim: `model`'s Δm above each rival's, per configuration (one-sided t-test over seeds)."""

    model: str = "multitab_net"
    rivals: tuple[str, ...] = ("mmoe", "ple", "stem")
    alpha: float = field(default=0.05, metadata=bounded(gt=0.0, lt=1.0))


@dataclass(frozen=True)
class StudyConfig:
    configs: tuple[str, ...] = field(metadata=bounded(unique=True))  # keys of bench.configs
    # Keys of `bench.data` that the study profile replaces (multitab.runs.profiles), checked against
    # BenchDataConfig's fields when params.yaml is loaded. The study's runs are run group `runs.study`.
    data: dict[str, Any] = field(default_factory=dict)
    claim: ClaimConfig = field(default_factory=ClaimConfig)
    group: str = "study"  # the run group (params.yaml `runs`) that trains the study

    def __post_init__(self) -> None:
        for key in ("configs",):
            if not getattr(self, key):
                raise ConfigError(f"study.{key}: expected a non-empty list")


# The attribution study's factors (issue 28; docs/study.md, "Attribution"): each factor's values, in the
# order <the authors' code's> first. `epochs` also takes an integer cap (with early stopping).
ATTRIBUTION_FACTORS: dict[str, tuple[str, ...]] = {
    "evaluation": ("training_rows", "held_out"),  # test (and validation) = the training rows | a held-out split
    "data_seed": ("per_run", "fixed"),  # a new dataset per run seed | the configuration's one dataset
    "targets": ("raw", "standard"),  # regression targets raw | standardised with train statistics
    "optimizer": ("adamw_wd0", "adam_wd1e-5"),  # every model: AdamW, weight decay 0 | Adam, 1e-5
    "mask": ("none", "t_t"),  # MultiTab-Net's attention mask
    "inter_sample": ("per_sample_mixing", "rope_attention"),  # MultiTab-Net's `rope: true` layer (P3)
    "epochs": ("authors",),  # the authors' 10 (max_epochs null) or an integer cap
}
ARM_SOURCES = ("authors_code", "paper", "ours")


@dataclass(frozen=True)
class ArmConfig:
    """One arm: the factors it sets (the first arm every factor, each later one exactly one factor changed
    from the arm before), and whose setup it is."""

    set: dict[str, Any]
    source: Literal["authors_code", "paper", "ours"] = "ours"


@dataclass(frozen=True)
class AttributionConfig:
    """params.yaml `attribution`: `configs` (keys of bench.configs) x the arms, in order, trained by run group
    `group` (its models, seeds, base `train`, folders); `data` replaces keys of `bench.data` (n_samples)."""

    configs: tuple[str, ...] = field(metadata=bounded(unique=True))
    arms: dict[str, ArmConfig]
    data: dict[str, Any] = field(default_factory=dict)
    group: str = "attribution"
    claim: ClaimConfig = field(default_factory=ClaimConfig)
    # the arms to train and report (null: every arm), e.g. [A0_authors, A7_inter_sample] at the paper's scale;
    # each keeps the settings the whole ordered list gives it
    run_arms: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.configs:
            raise ConfigError("attribution.configs: expected a non-empty list")
        if not self.arms:
            raise ConfigError("attribution.arms: expected at least one arm")
        unknown = [a for a in self.run_arms or () if a not in self.arms]
        if unknown or self.run_arms == ():
            raise ConfigError(f"attribution.run_arms: {unknown or '[]'} are not arms ({list(self.arms)}); "
                              "null runs every arm")
        for key in ("evaluation", "data_seed", "targets"):
            if key in self.data:
                raise ConfigError(f"attribution.data.{key}: a factor, set per arm (attribution.arms)")
        previous: dict[str, Any] | None = None
        for name, arm in self.arms.items():
            where = f"attribution.arms.{name}"
            for factor, value in arm.set.items():
                if factor not in ATTRIBUTION_FACTORS:
                    raise ConfigError(f"{where}: unknown factor {factor!r}; known: {list(ATTRIBUTION_FACTORS)}")
                ok = value in ATTRIBUTION_FACTORS[factor] or (
                    factor == "epochs" and isinstance(value, int) and not isinstance(value, bool) and value >= 1)
                if not ok:
                    extra = " or an integer >= 1" if factor == "epochs" else ""
                    raise ConfigError(f"{where}.{factor}={short_repr(value)}: expected one of "
                                      f"{list(ATTRIBUTION_FACTORS[factor])}{extra}")
            if previous is None:
                missing = [f for f in ATTRIBUTION_FACTORS if f not in arm.set]
                if missing:
                    raise ConfigError(f"{where}: the first arm sets every factor; missing {missing}")
                previous = dict(arm.set)
                continue
            changed = [f for f, v in arm.set.items() if previous[f] != v]
            if len(arm.set) != 1 or len(changed) != 1:
                raise ConfigError(f"{where}: an arm after the first changes exactly one factor from the arm "
                                  f"before (one factor at a time); it sets {arm.set}")
            previous = {**previous, **arm.set}

    def settings(self) -> dict[str, dict[str, Any]]:
        """arm -> every factor's value in that arm (each arm laid over the one before), for the arms run
        (`run_arms`, in the arms' order)."""
        return {name: settings for name, settings in self._laid().items()
                if self.run_arms is None or name in self.run_arms}

    def authors(self) -> tuple[str, dict[str, Any]]:
        """(name, every factor's value) of the authors' exact setup: the first arm whose source is `authors_code`
        (A0_authors), whether or not `run_arms` trains it. `protocol: authors_code` runs the study with it."""
        laid = self._laid()
        name = next((n for n, arm in self.arms.items() if arm.source == "authors_code"), None)
        if name is None:
            raise ConfigError("attribution.arms: no arm has source authors_code (the authors' setup, which "
                              "`protocol: authors_code` runs the study with)")
        return name, laid[name]

    def _laid(self) -> dict[str, dict[str, Any]]:
        """arm -> every factor's value in that arm (each arm laid over the one before), for every arm."""
        out: dict[str, dict[str, Any]] = {}
        current: dict[str, Any] = {}
        for name, arm in self.arms.items():
            current = {**current, **arm.set}
            out[name] = dict(current)
        return out

    def changes(self) -> dict[str, str]:
        """arm run -> what it changes from the arm run before it (`factor=value, ...`; the first: every factor)."""
        out: dict[str, str] = {}
        previous: dict[str, Any] = {}
        for name, settings in self.settings().items():
            out[name] = ", ".join(f"{k}={v}" for k, v in settings.items() if previous.get(k, object()) != v)
            previous = settings
        return out
