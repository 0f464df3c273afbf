"""The run matrix's types: one training run (Run), the seeds of one run trained as one stacked model (Stack), a
sweep's grid point as a name, and the names of runs.yaml and its sections. Nothing here reads params.yaml."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RUNS_FILE = "runs.yaml"


KEY = "train_runs"  # its top-level key (not `runs`: DVC reads params.yaml's `runs` under that name)


STACKS = "train_stacks"  # the stacked runs (groups with train.stack_seeds): one train_stack@ stage per stack



@dataclass(frozen=True)
class Run:
    """One training run: a run group's dataset x model x seed (x grid point)."""

    group: str
    dataset: str
    model: str  # registry name or `<model>@<variant>`
    seed: int
    point: dict[str, Any] | None  # a sweep's grid point (axis -> value), else None
    data: str  # processed folder
    verdict: str  # the validation verdict the data must hold
    out: str  # run folder: metrics.json, dvclive/
    checkpoints: str
    opt_in: bool
    hparams_file: str  # its one hyperparameter file (multitab.hparams; hparams_file() chooses it)
    # the model's source (a DVC dependency of its stage: a change re-trains it): a user's model's package folder (or
    # module file), src/multitab/models for the registry's (multitab.runs.locate.model_code)
    model_code: str

    @property
    def key(self) -> str:
        """`<group>-<dataset>-<model>[-<point>]-<seed>`, without `@` (DVC's stage names hold one) or `.` (DVC
        reads a dotted params key as a path): `multitab_net+single_none`, `lr0_001-dropout0_1`."""
        parts = [self.group, self.dataset, self.model.replace("@", "+")]
        if self.point:
            parts.append(point_id(self.point).replace(".", "_"))
        return "-".join([*parts, str(self.seed)])


@dataclass(frozen=True)
class Stack:
    """The runs of one group that differ only in their seed, trained as one stacked model (`train.stack_seeds`,
    multitab.training.stacked): one stage, writing every member's folder under `out` and `checkpoints`."""

    group: str
    dataset: str
    model: str
    point: dict[str, Any] | None
    seeds: tuple[int, ...]
    data: str
    verdict: str
    out: str  # the members' folders' parent: <out>/seed<S>
    checkpoints: str  # likewise
    opt_in: bool
    hparams_file: str
    model_code: str

    @property
    def key(self) -> str:
        """`<group>-<dataset>-<model>[-<point>]`, spelt as Run.key."""
        return "-".join(self.run_key(0).split("-")[:-1])

    def run_key(self, seed: int) -> str:
        return Run(self.group, self.dataset, self.model, seed, self.point, self.data, self.verdict, self.out,
                   self.checkpoints, self.opt_in, self.hparams_file, self.model_code).key

    def members(self) -> list[Run]:
        """The runs it trains, one per seed, each writing <out>/seed<S> and <checkpoints>/seed<S>."""
        return [Run(self.group, self.dataset, self.model, seed, self.point, self.data, self.verdict,
                    f"{self.out}/seed{seed}", f"{self.checkpoints}/seed{seed}", self.opt_in, self.hparams_file,
                    self.model_code)
                for seed in self.seeds]


def point_id(coords: Mapping[str, Any]) -> str:
    """`lr0.001-dropout0.1`: the folder name of a grid point."""
    def text(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return "-".join(f"{k}{text(v)}" for k, v in coords.items())

