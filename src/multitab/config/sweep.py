"""params.yaml `sweep`: the hyperparameter grids (stages sweep_<family>@..., `make sweep`).

One section per model family, because a DVC matrix needs its axes written out: each family's grid axes
are the hyperparameters the paper tunes for those models (appendix "Implementation Details"), and every
axis value is one grid point coordinate. The paper's grids are `PAPER_GRIDS`; params.yaml writes them out
(a test checks that they are equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multitab.config._build import ConfigError, bounded

# The paper's grids (appendix "Implementation Details"), per family: axis -> values.
PAPER_GRIDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "mlp": {"lr": (1e-4, 1e-3, 1e-2, 1e-1), "dropout": (0.0, 0.1, 0.2, 0.3)},
    "transformer": {"lr": (1e-4, 1e-3, 1e-2, 1e-1), "att_dropout": (0.0, 0.1, 0.2, 0.3),
                    "ff_dropout": (0.0, 0.1, 0.2, 0.3)},
    "inter_sample": {"lr": (1e-4, 1e-3, 1e-2, 1e-1), "att_dropout": (0.0, 0.1, 0.2, 0.3),
                     "ff_dropout": (0.0, 0.1, 0.2, 0.3), "rope": (False, True)},
    "xgboost": {"max_depth": (3, 4, 5, 6, 7, 8, 9, 10), "learning_rate": (0.01, 0.02, 0.05, 0.1, 0.2),
                "n_rounds": (25, 50, 100, 200, 300)},
}
# The models each family may sweep (their axes are keys the models' selections have).
FAMILY_MODELS: dict[str, tuple[str, ...]] = {
    "mlp": ("stl_mlp", "mtl_shared_bottom", "mmoe", "ple", "stem"),
    "transformer": ("ft_transformer", "tab_transformer"),
    "inter_sample": ("multitab_net", "saint"),
    "xgboost": ("xgboost",),
}
FAMILIES = tuple(PAPER_GRIDS)


@dataclass(frozen=True)
class SweepData:
    """One dataset a family sweeps: its processed folder and the validation verdict it must pass."""

    name: str  # a real dataset (data/processed/<name>) or a MultiTab-Bench config (data/synthetic/<name>)
    data: str
    verdict: str


@dataclass(frozen=True)
class SweepFamily:
    data: tuple[SweepData, ...]  # empty: the family sweeps nothing (no stages)
    models: tuple[str, ...]
    # axis -> values; ties are broken by the grid's order: the axes in PAPER_GRIDS' order (set by
    # SweepConfig), each axis's values as listed (first wins)
    grid: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class SweepConfig:
    seeds: tuple[int, ...] = field(metadata=bounded(ge=0, unique=True))  # every grid point is trained with each; selection on the mean over them
    mlp: SweepFamily
    transformer: SweepFamily
    inter_sample: SweepFamily
    xgboost: SweepFamily
    # Keys of `train` that the sweep profile replaces for the grid points (multitab.profiles), checked
    # against TrainConfig's fields when params.yaml is loaded.
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ConfigError("sweep.seeds: expected a non-empty list")
        for family in FAMILIES:
            fam: SweepFamily = getattr(self, family)
            axes = list(PAPER_GRIDS[family])
            if set(fam.grid) != set(axes):
                raise ConfigError(f"sweep.{family}.grid: axes must be {axes}, got {list(fam.grid)}")
            object.__setattr__(fam, "grid", {a: fam.grid[a] for a in axes})  # the canonical axis order
            empty = [a for a, values in fam.grid.items() if not values]
            if empty:
                raise ConfigError(f"sweep.{family}.grid.{empty[0]}: expected a non-empty list")
            wrong = [m for m in fam.models if m not in FAMILY_MODELS[family]]
            if wrong:
                raise ConfigError(f"sweep.{family}.models: {wrong} cannot be swept in this family; "
                                  f"it sweeps {list(FAMILY_MODELS[family])}")
            names = [d.name for d in fam.data]
            if len(set(names)) != len(names):
                raise ConfigError(f"sweep.{family}.data: a dataset is listed twice: {names}")

    def family(self, name: str) -> SweepFamily:
        if name not in FAMILIES:
            raise ConfigError(f"unknown sweep family {name!r}; known: {list(FAMILIES)}")
        fam: SweepFamily = getattr(self, name)
        return fam

    def family_of(self, model: str) -> str:
        for family, models in FAMILY_MODELS.items():
            if model in models:
                return family
        raise ConfigError(f"model {model!r} has no sweep family; sweepable: {sorted(sum(FAMILY_MODELS.values(), ()))}")
