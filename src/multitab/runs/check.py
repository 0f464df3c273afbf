"""What `python -m multitab.runs` refuses before it writes runs.yaml: a run matrix that DVC cannot run as declared.
Each refusal is one ConfigError line naming the run, the file or the params key, and what to do (exit 3).

- Stage keys: every key of runs.yaml is letters, digits, `_`, `-` and `+` (a grid value goes into it; the names
  params.yaml gives are checked at load, multitab.config.names.STAGE_NAME_PART).
- Folders: no two training stages write the same folder, or one inside the other (their `out` and `checkpoints`;
  a stacked stage's are its members' parent), among every group's runs, opt-in or not: `dvc repro` of one would
  overwrite the other's results.
- Size: at most `orchestration.max_train_stages` training stages (DVC reads every stage on each `dvc status`).
- Hyperparameters: params.yaml's overlays (`train.model_overrides`, the variants, a sweep group's `grid`) and the
  protocol's (hparams/protocol/) name keywords their model takes, of its types (multitab.hparams.keywords); every
  run's file gives every keyword of its model but those the pipeline supplies, no other, each of its type, and
  `optim:` exactly when the model has an optimiser; the keywords a run trains with (file and overlays) again.
  A swept file (hparams/swept/) is written by the sweep_select stage after this, from a checked authors' file
  and a grid point: it is not read here.
- A user's model (params.yaml `models:`): its class imports (its package's code runs), its hyperparameters are
  complete and typed, and it keeps the model contract on a small schema (multitab.models.contract, quick: no
  overfitting or determinism run; `python -m multitab.models check <name>` runs every check).
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, Params
from multitab.files.yaml_data import short_repr
from multitab.hparams import HPARAMS, POINT_KEYS, Hparams, declared, protocol_overlay, resolve
from multitab.hparams.keywords import expected, fits, keyword_types, problems
from multitab.hparams.recipe import is_recipe, n_features, read_run_file
from multitab.registry import user_models
from multitab.runs.expand import expand, stacked
from multitab.runs.profiles import group_train, run_train
from multitab.runs.resolve import read_key
from multitab.runs.types import Run, Stack

STAGE_KEY = re.compile(r"[A-Za-z0-9_+-]+")


def check(params: Params, groups: Sequence[str], root: Path) -> None:
    """Raise ConfigError at the first thing above that the run matrix of `groups` (the groups runs.yaml is to hold)
    gets wrong; hyperparameter files are read under `root` (the project)."""
    try:
        _check(params, groups, root)
    except ConfigError:
        raise
    except (OSError, ValueError) as e:  # a file read here (the protocol's overlay, a grid point over a file) is wrong
        raise ConfigError(str(e)) from None


def _check(params: Params, groups: Sequence[str], root: Path) -> None:
    _check_user_models(params, root)
    alone, stacks = stacked(params, expand(params, groups))
    _check_keys(params, [*alone.values(), *stacks.values()])
    _check_size(params, len(alone) + len(stacks))
    _check_folders(params)
    _check_overlays(params, root)
    _check_files(params, alone.values(), root)
    _check_files(params, [s.members()[0] for s in stacks.values()], root)


def _check_keys(params: Params, stages: Iterable[Run | Stack]) -> None:
    for s in stages:
        if not STAGE_KEY.fullmatch(s.key):
            raise ConfigError(f"{params.source}: runs.{s.group}: stage key {s.key!r} holds characters a DVC stage "
                              f"name cannot (letters, digits, `_`, `-`, `+` only); its grid point {s.point} "
                              "goes into it")


def _check_size(params: Params, n: int) -> None:
    if "orchestration" not in params.sections:  # a project that runs its stages by hand (the tests' small ones)
        return
    cap = params.orchestration.max_train_stages
    if n > cap:
        raise ConfigError(f"{params.source}: the run matrix has {n} training stages, more than "
                          f"orchestration.max_train_stages={cap}: DVC reads every stage on each `dvc status` and "
                          f"`dvc repro` (about 35 ms each, docs/orchestration.md); to run it, raise "
                          f"orchestration.max_train_stages in {params.source}, or declare fewer seeds, models or "
                          f"points, or stack the seeds (train.stack_seeds: one stage per dataset and model)")


def _check_folders(params: Params) -> None:
    """Every group's stages, opt-in or not: the folders of a group that runs.yaml leaves out are on disk too."""
    alone, stacks = stacked(params, expand(params))
    claims: dict[str, str] = {}  # folder -> "stage (out|checkpoints)"
    stages: list[tuple[str, Run | Stack]] = [*((f"train@{k}", r) for k, r in alone.items()),
                                             *((f"train_stack@{k}", t) for k, t in stacks.items())]
    for stage, s in stages:
        for which in ("out", "checkpoints"):
            folder, claim = posixpath.normpath(getattr(s, which)), f"{stage} ({which})"
            if folder in claims:
                raise ConfigError(f"{params.source}: {claims[folder]} and {claim} write the same folder {folder}: "
                                  f"give one of their run groups its own `out` and `checkpoints`")
            claims[folder] = claim
    for folder, claim in claims.items():
        parent = posixpath.dirname(folder)
        while parent not in ("", "/", "."):
            if parent in claims:
                raise ConfigError(f"{params.source}: {claim} writes {folder}, inside the folder {parent} of "
                                  f"{claims[parent]}: give one of their run groups its own `out` and `checkpoints`")
            parent = posixpath.dirname(parent)


def _overlays(params: Params) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(params key, its keys) of `train` and of each group's `train` overlay."""
    yield "train", {k: getattr(params.train, k) for k in ("model_overrides", "variants")}
    for name in params.runs:
        yield f"runs.{name}.train", params.runs[name].train


def _refuse(where: str, found: list[tuple[str, str]], tail: str = "") -> None:
    """The first of `found` (multitab.hparams.keywords.problems) as the error, `where` the key path to it."""
    if found:
        keyword, what = found[0]
        raise ConfigError(f"{where}.{keyword}: {what} {tail}".rstrip())


def _check_overlays(params: Params, root: Path) -> None:
    """What params.yaml and the protocol lay over the files, blamed on them (not on a file they are laid over)."""
    from multitab.models import MODELS

    for where, given in _overlays(params):
        for key, values in given.get("model_overrides", {}).items():
            model = key.partition("@")[0]
            _refuse(f"{params.source}: {where}.model_overrides.{key}", problems(model, values, complete=False))
        for name, variant in given.get("variants", {}).items():
            _refuse(f"{params.source}: {where}.variants.{name}.overrides",
                    problems(variant.model, variant.overrides, complete=False))
    for name, group in params.runs.items():
        for axis, values in group.grid.items():
            for model in group.models:
                base, _ = group_train(params, name).resolve(model)
                for value in values:
                    _check_point_value(params, f"runs.{name}.grid.{axis}", axis, base, value)
    protocol = f"{HPARAMS}/protocol/{params.protocol}.yaml"
    for model, values in protocol_overlay(root, params.protocol)["model"].items():
        if model not in MODELS:
            raise ConfigError(f"{protocol}: model.{model}: not a registered model (known: {sorted(MODELS)})")
        _refuse(f"{protocol}: model.{model}", problems(model, values, complete=False))


def _check_point_value(params: Params, where: str, axis: str, model: str, value: Any) -> None:
    if axis == "rope":  # true / false: the inter-sample layer (multitab.hparams.ROPE)
        if not isinstance(value, bool):
            raise ConfigError(f"{params.source}: {where}: {short_repr(value)}: expected true or false")
        return
    types = keyword_types(model)
    for section, key in POINT_KEYS[axis]:
        if section == "optim":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{params.source}: {where}: {short_repr(value)}: expected a number > 0 (optim.{key})")
        elif key in types and not fits(types[key], value):
            raise ConfigError(f"{params.source}: {where}: {short_repr(value)}: expected {expected(types[key])} "
                              f"({model}'s constructor keyword {key})")


def _check_files(params: Params, runs: Iterable[Run], root: Path) -> None:
    """Each run's file, then what it trains with; once per group, dataset, model and point (not per seed)."""


    files: dict[str, Hparams] = {}
    overlay = protocol_overlay(root, params.protocol)
    seen: set[str] = set()
    for run in runs:
        once = json.dumps([run.group, run.dataset, run.model, run.point, run.hparams_file], default=str)
        if run.hparams_file.startswith(f"{HPARAMS}/swept/") or once in seen:
            continue
        seen.add(once)
        config, point = run_train(params, run.group, run.model, run.point)
        base, _ = config.resolve(run.model)
        file, tail = run.hparams_file, f"(run {run.key} reads it; docs/extending.md, \"A model\")"
        key = read_key(file, run)
        if key not in files or is_recipe(file):
            try:
                files[key] = read_run_file(root, file, run.model, functools.partial(n_features, run.dataset, params))
            except (OSError, ValueError) as e:
                raise ConfigError(f"{e} {tail}") from None
            _refuse(f"{files[key].file}: model", problems(base, files[key].model), tail)
            _check_optim(base, files[key], tail)
        h = resolve(files[key], overlay, model=run.model, dataset=run.dataset, point=point, config=config)
        _refuse(f"{files[key].file} with its grid point, {HPARAMS}/protocol/{params.protocol}.yaml and "
                f"{params.source} "
                f"runs.{run.group}'s train laid over it: model", problems(base, h.model), tail)


def _check_optim(model: str, h: Hparams, tail: str = "") -> None:
    """`optim:` given exactly when `model` is a torch module (one that trains itself has no optimiser)."""
    import torch

    from multitab.models import model_class

    if issubclass(model_class(model), torch.nn.Module) == (h.optim is None):
        what = (f"missing: {model} trains with an optimiser (optimizer, lr, weight_decay, max_epochs)"
                if h.optim is None else f"given, but {model} trains itself: remove it")
        raise ConfigError(f"{h.file}: optim: {what} {tail}".rstrip())


def _check_user_models(params: Params, root: Path) -> None:
    """Every model params.yaml declares (`models:`): it imports, its hyperparameters are complete and typed, and it
    keeps the model contract (quick); the first failure is the error, naming the model's key."""
    from multitab.models import ModelImportError, import_class
    from multitab.models.contract import check_class

    for name, entry in user_models().items():
        where = f"{params.source}: models.{name}"
        try:
            cls = import_class(entry.cls)
        except ModelImportError as e:
            raise ConfigError(f"{where}.class: {e}") from None
        try:
            h = declared(name, root)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{where}.hparams: {e}") from None
        _refuse(f"{h.file}: model", problems(name, h.model), f"({where})")
        _check_optim(name, h, f"({where})")
        failures, _ = check_class(cls, h.model, quick=True, epochs=entry.epochs)
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise ConfigError(f"{where} ({entry.cls}) breaks the model contract: {failures[0]}{more}; `python -m "
                              f"multitab.models check {name}` runs every check")
