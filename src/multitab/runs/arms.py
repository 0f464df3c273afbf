"""The runs of the groups that train arm settings (multitab.config.attribution.trains_arm): the attribution
study's group, and the study's under `protocol: authors_code` (the authors' arm). multitab.runs.expand takes
them from here; every other group is a plain product of its data, models, grid points and seeds.

Such a run is keyed `<group>-<data>-<model>-<point>-<seed>` by the settings it trains with (its point), writes
`<out>/<data>/<model>/<point>/seed<S>` and reads its configuration's hyperparameter file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from multitab.config import Params
from multitab.config.attribution import arm_runs, study_runs
from multitab.config.runs import DATA_KINDS
from multitab.runs.locate import hparams_file, model_code
from multitab.runs.profiles import group_train
from multitab.runs.types import Run, point_id


def settings_group_runs(params: Params, name: str) -> list[Run] | None:
    """The runs of group `name` when it trains arm settings; None for any other group."""
    if params.runs[name].data == "attribution":
        return attribution_runs(params, name)
    members = study_runs(params) if "study" in params.sections and params.study.group == name else None
    if members is None:
        return None
    return point_runs(params, name, "study", members, group_train(params, name).hparams)


def attribution_runs(params: Params, name: str) -> list[Run]:
    """The runs of the attribution study's group `name` (multitab.config.attribution): every arm x configuration x
    model x seed, so that the arms' shared runs have one key (the list holds them once per arm; `expand` keeps
    one)."""
    members = [run for runs in arm_runs(params).values() for run in runs]
    return point_runs(params, name, "attribution", members, "authors")


def point_runs(params: Params, name: str, kind: str, members: Iterable[tuple[str, str, int, str, dict[str, Any]]],
               selection: str) -> list[Run]:
    """The runs of group `name` from `members` (config, model, seed, data name, point: an arm's settings), their
    data of kind `kind` (DATA_KINDS) and each its configuration's hyperparameter file of `selection`."""
    group = params.runs[name]
    root = Path(params.source).parent
    data_pattern, verdict_pattern = DATA_KINDS[kind]
    runs = []
    for config, model, seed, data, point in members:
        folder = f"{data}/{model}/{point_id(point)}/seed{seed}"
        runs.append(Run(group=name, dataset=data, model=model, seed=seed, point=point,
                        data=data_pattern.format(data), verdict=verdict_pattern.format(data),
                        out=f"{group.out}/{folder}", checkpoints=f"{group.checkpoints}/{folder}",
                        opt_in=group.opt_in, hparams_file=hparams_file(selection, "study", config, model, root),
                        model_code=model_code(params, model)))
    return runs
