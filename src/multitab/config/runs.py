"""params.yaml `runs`: the run matrix, declared once as run groups.

Every training run of the pipeline belongs to one group: its data x models x seeds (x a sweep's grid),
trained with the group's `train` keys laid over params.yaml's `train`. dvc.yaml has one training stage,
`train@<run>`, over the runs the groups expand to (multitab.runs writes them to runs.yaml). Adding a
run group is a params.yaml change only:

    runs:
      my_group:
        data: {bench: [p06_pd3_t3]}    # or `datasets` (every real dataset), `bench`, `study`
        models: [mmoe, multitab_net]
        seeds: [0, 1]
        train: {max_epochs: 20}        # keys of `train` replaced for these runs ({} for none)
        opt_in: true                   # `make repro` leaves it out;
                                       # `python -m flows.pipeline --targets train@my_group-...` runs it

A sweep group names its family (`sweep: mlp | transformer | inter_sample | xgboost`) and its `grid`
(axis -> values, the family's axes; PAPER_GRIDS are the paper's); every grid point is one more axis of
the matrix. Each group writes its runs under `out/<dataset>/<model>[/<point>]/seed<S>` and their
checkpoints under `checkpoints/...`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multitab.config._build import ValueProblem, bounded, optional
from multitab.files.yaml_data import short_repr
from multitab.registry import is_user_model

# Where each kind of data lives: (processed folder, validation verdict) per name.
DATA_KINDS: dict[str, tuple[str, str]] = {
    "datasets": ("data/processed/{}", "data/validated/{}.json"),  # the real datasets (`datasets:`)
    "bench": ("data/synthetic/{}", "data/validated/synthetic/{}.json"),  # MultiTab-Bench (`bench.configs`)
    "study": ("data/study/{}", "data/validated/study/{}.json"),  # the study's MultiTab-Bench (`study.configs`)
    # the attribution study's data (`attribution`): one folder per configuration x data settings (x seed)
    "attribution": ("data/attribution/{}", "data/validated/attribution/{}.json"),
}

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
# a run group key params.yaml may leave out: `python -m multitab.runs show` prints its default with the code line
SHOWN = "the default, which `python -m multitab.runs show` prints with its line here"


@dataclass(frozen=True)
class RunGroup:
    # `datasets` | `bench` | `study` (every name of that kind), or {kind: [names]} (some of them)
    data: str | dict[str, tuple[str, ...]]
    models: tuple[str, ...] = field(metadata=bounded(unique=True))  # registry names or `<model>@<variant>`
    seeds: tuple[int, ...] = field(metadata=bounded(ge=0, unique=True))
    # keys of `train` replaced for this group's runs, checked against TrainConfig's fields at load; `{}`
    # for none (required: the group's train stages depend on it, and DVC needs the key to exist)
    train: dict[str, Any]
    # true: `make repro` leaves the group out; a target that needs it runs it
    opt_in: bool = field(default=False, metadata=optional(SHOWN))
    # a sweep group's family (FAMILIES) and its axes -> values: both or neither (a group that is no sweep)
    sweep: str | None = field(default=None, metadata=optional("not a sweep"))
    grid: dict[str, tuple[Any, ...]] = field(default_factory=dict, metadata=optional("not a sweep"))
    # run folders: <out>/<dataset>/<model>[/<point>]/seed<S>; the checkpoints likewise
    out: str = field(default="results/runs", metadata=optional(SHOWN))
    checkpoints: str = field(default="results/checkpoints", metadata=optional(SHOWN))

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            if self.data not in DATA_KINDS:
                raise ValueProblem(f"data={short_repr(self.data)}: expected one of {list(DATA_KINDS)} or "
                                   "{kind: [names]}")
        else:
            unknown = sorted(set(self.data) - set(DATA_KINDS))
            if unknown:
                raise ValueProblem(f"data: unknown kind(s) {unknown}; known: {list(DATA_KINDS)}")
        if not self.seeds:
            raise ValueProblem("seeds: expected a non-empty list")
        if (self.sweep is None) != (not self.grid):
            raise ValueProblem("sweep and grid go together: a sweep group names its family and its grid")
        if self.sweep is not None:
            if self.sweep not in FAMILIES:
                raise ValueProblem(f"sweep={short_repr(self.sweep)}: expected one of {list(FAMILIES)}")
            axes = list(PAPER_GRIDS[self.sweep])
            if set(self.grid) != set(axes):
                raise ValueProblem(f"grid: axes must be {axes} (family {self.sweep}), got {list(self.grid)}")
            object.__setattr__(self, "grid", {a: self.grid[a] for a in axes})  # the canonical axis order
            empty = [a for a, values in self.grid.items() if not values]
            if empty:
                raise ValueProblem(f"grid.{empty[0]}: expected a non-empty list")
            # a user's model may be swept in any family whose axes are keywords it takes (checked at expansion)
            wrong = [m for m in self.models if m not in FAMILY_MODELS[self.sweep] and not is_user_model(m)]
            if wrong:
                raise ValueProblem(f"models: {wrong} cannot be swept in family {self.sweep}; "
                                  f"it sweeps {list(FAMILY_MODELS[self.sweep])}")

    def data_names(self, kinds: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
        """(kind, name) of every dataset of the group; `kinds`: every name of each kind."""
        if isinstance(self.data, str):
            return [(self.data, name) for name in kinds[self.data]]
        return [(kind, name) for kind, names in self.data.items() for name in names]
