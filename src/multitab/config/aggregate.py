"""params.yaml `aggregate` (the paper's tables from the runs), and `SyntheticConfig`, the view of one
`bench.configs` entry that the figures and tables label their axes with.

Run naming: a run folder results/runs/<dataset>/<model>/seed<S> is named by a registry model
(`multitab_net`) or by a variant `<model>@<variant>` (`multitab_net@single_none`); Table 2 lists its
rows in `aggregate.ablation`, each naming the run that holds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from multitab.config._build import ConfigError, optional
from multitab.config.bench import BenchDatasetConfig
from multitab.registry import label, table_order


@dataclass(frozen=True)
class AblationRow:
    task_tokens: Literal["single", "multiple"]
    attention_mask: str  # the paper's label: none, F-not-T, T-not-T, F-not-T & T-not-T
    model: str  # the run holding this row: `<model>@<variant>`, or the main model for the paper's choice


@dataclass(frozen=True)
class SignificanceConfig:
    model: str  # the model tested against each baseline (MultiTab-Net)
    baselines: tuple[str, ...]
    equal_var: bool  # Table 8: Student's t-test (true) or Welch's (false)


@dataclass(frozen=True)
class FiguresConfig:
    models: tuple[str, ...]  # Figures 5 and 6: the STL-relative models drawn per synthetic configuration
    dpi: int


@dataclass(frozen=True)
class AggregateConfig:
    baseline: str  # the single-task baseline b of Equation 5
    # the tables' rows: `all` (every registered model, in the registry's table order: multitab.registry.table_order)
    # or registry names, in row order; the labels are the registry's
    models: Literal["all"] | tuple[str, ...]
    seeds: tuple[int, ...] | None  # the seeds every run set must hold; null = every seed found per dataset
    pairing: Literal["mean", "seed"]  # per-seed Δm against the STL seed-mean (paper) or STL's same seed
    regression_metric: Literal["ev", "mse"]  # Δm on explained variance (paper) or MSE (lower is better)
    std_ddof: int  # Tables 5–7, 10 and the standard errors: 1 = sample standard deviation
    significance: SignificanceConfig
    figures: FiguresConfig
    ablation: tuple[AblationRow, ...]
    # the public datasets of Tables 2–10, in the paper's order; left out: the keys of `datasets:` (load_params)
    datasets: tuple[str, ...] = field(default=(), metadata=optional("every key of `datasets:`, in its order"))

    def __post_init__(self) -> None:
        if self.baseline not in self.rows:
            raise ConfigError(f"aggregate.baseline={self.baseline!r} is not in aggregate.models")
        if self.std_ddof not in (0, 1):
            raise ConfigError(f"aggregate.std_ddof={self.std_ddof} must be 0 or 1")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"aggregate.seeds={list(self.seeds)} has duplicates")

    @property
    def rows(self) -> tuple[str, ...]:
        """The models the tables list, in row order (`models`, with `all` read from the registry now)."""
        return table_order() if self.models == "all" else tuple(self.models)

    def label(self, model: str) -> str:
        """The registry's label of a run name; variants keep their suffix (`MultiTab-Net@single_none`)."""
        return label(model)


# ------------------------------------------------------------------------------------------ MultiTab-Bench
GROUPS = ("correlation", "complexity", "count", "nonuniform")


@dataclass(frozen=True)
class SyntheticConfig:
    """What the figures need to know of one MultiTab-Bench configuration."""

    name: str
    groups: tuple[str, ...]  # correlation | complexity | count (Figure 5) | nonuniform (Figure 6) | other
    correlation: float | None
    degrees: tuple[int, ...] | None

    def level(self, group: str) -> str:
        """The x-axis label of this configuration within `group`."""
        p = "?" if self.correlation is None else f"{self.correlation:g}"
        pd_ = "?" if self.degrees is None else "[" + ", ".join(map(str, self.degrees)) + "]"
        t = "?" if self.degrees is None else str(len(self.degrees))
        if group == "correlation":
            return f"p={p}"
        if group == "complexity":
            return f"PD={pd_}"
        if group == "count":
            return f"t={t}"
        if group == "nonuniform":
            return f"t={t}, PD={pd_}, p={p}"
        return self.name

    def sort_key(self, group: str) -> tuple[float, ...]:
        degrees = self.degrees or ()
        corr = self.correlation if self.correlation is not None else math.inf
        if group == "correlation":
            return (corr,)
        if group == "count":
            return (float(len(degrees)),)
        return (float(len(degrees)), *map(float, degrees), corr)


def synthetic_configs(configs: Mapping[str, BenchDatasetConfig]) -> dict[str, SyntheticConfig]:
    """The figures' view of `bench.configs` (already checked by multitab.config.bench)."""
    return {name: SyntheticConfig(name=name, groups=tuple(cfg.groups), correlation=float(cfg.correlation),
                                  degrees=tuple(cfg.degrees)) for name, cfg in configs.items()}
