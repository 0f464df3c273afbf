"""Every name params.yaml uses as a key or a list item must name something: a model of the registry, a
dataset (a `datasets:` entry or a MultiTab-Bench configuration), a train variant. A misspelt name in a
per-model or per-dataset map (`train.optim: {stl_mpl: ...}`, `train.patience: {acs_incme: 1}`,
`validation.policy`) would otherwise be ignored without a word; here it fails at load, naming the key and
the names it could be."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from typing import Any

from multitab.config._build import ConfigError
from multitab.datasets.schema import SCHEMAS
from multitab.names import MODEL_NAMES


def _unknown(source: str, key: str, names: Iterable[str], known: Iterable[str], what: str) -> None:
    known = sorted(set(known))
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(f"{source}: {key}: {name!r} is not {what}{hint} (known: {known})")


def check_names(sections: dict[str, Any], source: str) -> None:
    """Raise ConfigError at the first name that names nothing (sections a project leaves out are skipped)."""
    # the registry's names, and any a program registered at run time (the tests' tiny models)
    registry = sys.modules.get("multitab.models")
    models = sorted(set(MODEL_NAMES) | set(getattr(registry, "MODELS", {})))
    real = sorted(set(SCHEMAS) | set(sections.get("datasets", {})))
    configs = sorted(sections["bench"].configs) if "bench" in sections else []
    # a run group may also name a processed folder given directly (data/processed/<name>, no datasets: entry)
    declared = [name for group in sections.get("runs", {}).values() if isinstance(group.data, dict)
                for name in group.data.get("datasets", ())]
    any_dataset = sorted({*real, *configs, *declared})
    a_model, a_dataset = "a registered model", "a dataset (datasets:) or a MultiTab-Bench config (bench.configs)"
    _unknown(source, "datasets", sections.get("datasets", {}), SCHEMAS, "a dataset with a schema")
    if "validation" in sections:
        _unknown(source, "validation.policy", sections["validation"].policy, real, "a dataset")
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
            raise ConfigError(f"{source}: runs.{attribution.group}.data={group.data!r}: the attribution study's "
                              "group trains on `data: attribution` (its arms' data)")
        _unknown(source, "attribution.claim", [attribution.claim.model, *attribution.claim.rivals], group.models,
                 f"one of runs.{attribution.group}.models")
    if "aggregate" in sections:
        agg = sections["aggregate"]
        _unknown(source, "aggregate.models", agg.models, models, a_model)
        _unknown(source, "aggregate.datasets", agg.datasets, [*real, *declared], "a dataset")
        _unknown(source, "aggregate.significance", [agg.significance.model, *agg.significance.baselines],
                 agg.models, "one of aggregate.models")
        _unknown(source, "aggregate.figures.models", agg.figures.models, agg.models, "one of aggregate.models")
        for row in agg.ablation:
            model, _, variant = row.model.partition("@")
            _unknown(source, "aggregate.ablation", [model], models, f"a registered model (in {row.model!r})")
            if variant and "train" in sections:
                _unknown(source, "aggregate.ablation", [variant], variants, f"a train variant (in {row.model!r})")
