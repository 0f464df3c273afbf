"""The run matrix expanded: every run of params.yaml's run groups (`runs`), in params.yaml's order, and the
stacks of the groups with `train.stack_seeds`. The groups that train arm settings take their runs from
multitab.runs.arms; every other group is a plain product of its data, models, grid points and seeds."""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, Params
from multitab.config.runs import DATA_KINDS
from multitab.runs.arms import settings_group_runs
from multitab.runs.locate import data_names, grid_points, hparams_file, model_code
from multitab.runs.profiles import group_train
from multitab.runs.types import Run, Stack, point_id


def stacked(params: Params, runs: Mapping[str, Run]) -> tuple[dict[str, Run], dict[str, Stack]]:
    """`runs` split into those trained one by one and the stacks of the groups with `train.stack_seeds`
    (their runs grouped by dataset, model and grid point; the members keep their order)."""
    alone: dict[str, Run] = {}
    stacks: dict[str, list[Run]] = {}
    for key, run in runs.items():
        if group_train(params, run.group).stack_seeds:
            stacks.setdefault(key.rsplit("-", 1)[0], []).append(run)
        else:
            alone[key] = run
    out: dict[str, Stack] = {}
    for key, members in stacks.items():
        r = members[0]
        parent = lambda path: path.rsplit("/", 1)[0]  # noqa: E731 - <...>/seed<S> -> <...>
        out[key] = Stack(r.group, r.dataset, r.model, r.point, tuple(m.seed for m in members), r.data, r.verdict,
                         parent(r.out), parent(r.checkpoints), r.opt_in, r.hparams_file, r.model_code)
    return alone, out


def expand(params: Params, groups: Sequence[str] | None = None) -> dict[str, Run]:
    """key -> Run of every run of `groups` (default: every group), in params.yaml's order."""
    kinds = data_names(params)
    root = Path(params.source).parent
    out: dict[str, Run] = {}
    for name, group in params.runs.items():
        if groups is not None and name not in groups:
            continue
        arm_runs_ = settings_group_runs(params, name)
        if arm_runs_ is not None:
            for run in arm_runs_:
                if out.get(run.key, run) != run:
                    raise ConfigError(f"{params.source}: runs.{name}: run {run.key} is declared twice")
                out[run.key] = run  # a run two arms share: one key, trained once
            continue
        points: list[dict[str, Any] | None] = list(grid_points(group.grid)) if group.sweep else [None]
        for (kind, dataset), model, point, seed in itertools.product(
                group.data_names(kinds), group.models, points, group.seeds):
            folder = "/".join([dataset, model, *([point_id(point)] if point else []), f"seed{seed}"])
            data, verdict = (pattern.format(dataset) for pattern in DATA_KINDS[kind])
            selection = "authors" if point else group_train(params, name).hparams
            run = Run(group=name, dataset=dataset, model=model, seed=seed, point=point, data=data,
                      verdict=verdict, out=f"{group.out}/{folder}", checkpoints=f"{group.checkpoints}/{folder}",
                      opt_in=group.opt_in,
                      hparams_file=hparams_file(selection, kind, dataset, model, root),
                      model_code=model_code(params, model))
            if run.key in out:
                raise ConfigError(f"{params.source}: runs.{name}: run {run.key} is declared twice")
            out[run.key] = run
    return out


def declared_runs(params: Params) -> dict[tuple[str, str, int], str]:
    """(dataset, run model, seed) -> group of every run `make repro` trains (the groups that are not opt-in):
    the runs the aggregate stage reads."""
    return {(r.dataset, r.model, r.seed): r.group for r in expand(params).values() if not r.opt_in}


def active_groups(params: Params, groups: Iterable[str] = ()) -> list[str]:
    """The groups whose runs go into runs.yaml, in params.yaml's order: every group that is not opt-in and the
    opt-in `groups` asked for (names or shell patterns: `sweep_*`)."""
    asked: set[str] = set()
    for pattern in groups:
        matched = {name for name in params.runs if fnmatch.fnmatchcase(name, pattern)}
        if not matched:
            raise ConfigError(f"{params.source}: no run group matches {pattern!r}; known: {sorted(params.runs)}")
        asked |= matched
    chosen = {name for name, g in params.runs.items() if not g.opt_in or name in asked}
    return [name for name in params.runs if name in chosen]

