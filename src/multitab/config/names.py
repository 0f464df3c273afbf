"""Every name params.yaml uses as a key or a list item must name something: a model of the registry, a
dataset (a `datasets:` entry or a MultiTab-Bench configuration), a train variant. A misspelt name in a
per-model or per-dataset map (`train.optim: {stl_mpl: ...}`, `train.patience: {acs_incme: 1}`,
`validation.policy`) or a list (`runs.<group>.data.datasets`, `icl.datasets`) would otherwise be ignored
without a word, or fail later as a missing file; here it fails at load, naming the key and the names it could be.

A name that goes into a DVC stage name (a run group, a dataset, a MultiTab-Bench configuration, a train variant, a
user's model)
is letters, digits and `_` (STAGE_NAME_PART): DVC refuses other punctuation in a stage name (and `@` separates a
foreach stage from its key), `.` makes a params path of `runs.<group>.train`, `-` joins a run key's parts
(`<group>-<dataset>-<model>-<seed>`, multitab.runs: a `-` in a name would let two runs spell one key), `+` spells
a variant there, and a space or a shell character would split or change the stage's command."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable
from typing import Any

from multitab.config._build import ConfigError
from multitab.files.yaml_data import short_repr
from multitab.registry import DATASET_NAMES, REGISTRY

STAGE_NAME_PART = re.compile(r"[A-Za-z0-9_]+")


def _unknown(source: str, key: str, names: Iterable[str], known: Iterable[str], what: str) -> None:
    known = sorted(set(known))
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"{source}: {key}: {name!r} is not {what}{hint} (known: {known})")


def check_dataset_names(undeclared: Iterable[str], source: str) -> None:
    """A `datasets:` entry without `tasks:` names a dataset of the registry (read before its entry is built, whose
    keys differ for a declared one)."""
    _unknown(source, "datasets", undeclared, DATASET_NAMES,
             "a dataset with a schema, nor declared with `tasks:` (docs/extending.md, \"Your own data\")")


def _unsafe(source: str, key: str, names: Iterable[str]) -> None:
    for name in names:
        if not STAGE_NAME_PART.fullmatch(name):
            raise ConfigError(f"{source}: {key}: {name!r} goes into DVC stage names: use letters, digits and `_` only "
                              "(`-` joins a run key's parts, `@`, `+` and `.` mean something there, DVC refuses other "
                              "punctuation, a space splits the stage's command)")


def check_stage_names(sections: dict[str, Any], source: str) -> None:
    """Raise ConfigError at the first name that goes into a stage name and cannot (STAGE_NAME_PART)."""
    _unsafe(source, "datasets", sections.get("datasets", {}))
    _unsafe(source, "models", sections.get("models", {}))
    if "bench" in sections:
        _unsafe(source, "bench.configs", sections["bench"].configs)
    if "train" in sections:
        _unsafe(source, "train.variants", sections["train"].variants)
    _unsafe(source, "runs", sections.get("runs", {}))
    for name, group in sections.get("runs", {}).items():
        _unsafe(source, f"runs.{name}.train.variants", group.train.get("variants", {}))
        if isinstance(group.data, dict):
            _unsafe(source, f"runs.{name}.data.datasets", group.data.get("datasets", ()))


def check_names(sections: dict[str, Any], source: str) -> None:
    """Raise ConfigError at the first name that names nothing (sections a project leaves out are skipped)."""
    check_stage_names(sections, source)
    # the registry's names, and any a program registered at run time (the tests' tiny models)
    registry = sys.modules.get("multitab.models")
    models = sorted(set(REGISTRY) | set(getattr(registry, "MODELS", {})))
    configs = sorted(sections["bench"].configs) if "bench" in sections else []
    # The datasets are the `datasets:` entries. A project without that section (the tests' small ones) has no
    # stage that makes processed data: its run groups name processed folders given directly (data/processed/<name>).
    if "datasets" in sections:
        real, declared = sorted(sections["datasets"]), []
    else:
        real = sorted(DATASET_NAMES)
        declared = [name for group in sections.get("runs", {}).values() if isinstance(group.data, dict)
                    for name in group.data.get("datasets", ())]
    any_dataset = sorted({*real, *configs, *declared})
    a_model, a_dataset = "a registered model", "a dataset (datasets:) or a MultiTab-Bench config (bench.configs)"
    datasets = sections.get("datasets", {})
    check_dataset_names([n for n, cfg in datasets.items() if not cfg.declared], source)
    for name in datasets:
        if datasets[name].declared and name in DATASET_NAMES:
            raise ConfigError(f"{source}: datasets.{name}.tasks: {name} has a schema of its own; a declared dataset "
                              "takes a name the registry does not use")
    if "validation" in sections:
        _unknown(source, "validation.policy", sections["validation"].policy, real, "a dataset")
        _unknown(source, "validation.processed.policy", sections["validation"].processed.policy, any_dataset,
                 a_dataset)
    if "train" in sections:
        train = sections["train"]
        _unknown(source, "train.optim", train.optim, models, a_model)
        _unknown(source, "train.patience", train.patience, ["default", *any_dataset], f"`default` or {a_dataset}")
        for name, variant in train.variants.items():
            _unknown(source, f"train.variants.{name}.model", [variant.model], models, a_model)
        for key in train.model_overrides:
            model, _, dataset = key.partition("@")
            _unknown(source, "train.model_overrides", [model], models, f"a registered model (in {key!r})")
            if dataset:
                _unknown(source, "train.model_overrides", [dataset], any_dataset, f"{a_dataset} (in {key!r})")
    variants = sections["train"].variants if "train" in sections else {}
    for name, group in sections.get("runs", {}).items():
        for model in group.models:
            base, _, variant = model.partition("@")
            _unknown(source, f"runs.{name}.models", [base], models, a_model)
            if variant:
                _unknown(source, f"runs.{name}.models", [variant], variants, f"a train variant (in {model!r})")
        if isinstance(group.data, dict):
            known = {"datasets": [*real, *declared], "bench": configs, "study": configs, "attribution": configs}
            for kind, names in group.data.items():
                _unknown(source, f"runs.{name}.data.{kind}", names, known[kind], a_dataset)
    if "icl" in sections and "datasets" in sections:
        _unknown(source, "icl.datasets", sections["icl"].datasets, [*real, *configs], a_dataset)
    if "study" in sections:
        study = sections["study"]
        groups = sections.get("runs", {})
        _unknown(source, "study.group", [study.group], groups, "a run group (runs:)")
        _unknown(source, "study.claim", [study.claim.model, *study.claim.rivals], groups[study.group].models,
                 f"one of runs.{study.group}.models")
    if "attribution" in sections:
        attribution = sections["attribution"]
        groups = sections.get("runs", {})
        _unknown(source, "attribution.group", [attribution.group], groups, "a run group (runs:)")
        group = groups[attribution.group]
        if group.data != "attribution":
            raise ConfigError(f"{source}: runs.{attribution.group}.data={short_repr(group.data)}: the attribution "
                              "study's group trains on `data: attribution` (its arms' data)")
        _unknown(source, "attribution.claim", [attribution.claim.model, *attribution.claim.rivals], group.models,
                 f"one of runs.{attribution.group}.models")
    if "aggregate" in sections:
        agg = sections["aggregate"]
        if agg.models != "all":
            _unknown(source, "aggregate.models", agg.models, models, a_model)
        _unknown(source, "aggregate.datasets", agg.datasets, [*real, *declared], "a dataset")
        _unknown(source, "aggregate.significance", [agg.significance.model, *agg.significance.baselines],
                 agg.rows, "one of aggregate.models")
        _unknown(source, "aggregate.figures.models", agg.figures.models, agg.rows, "one of aggregate.models")
        for row in agg.ablation:
            model, _, variant = row.model.partition("@")
            _unknown(source, "aggregate.ablation", [model], models, f"a registered model (in {row.model!r})")
            if variant and "train" in sections:
                _unknown(source, "aggregate.ablation", [variant], variants, f"a train variant (in {row.model!r})")
