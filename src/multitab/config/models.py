"""params.yaml `models`: a user's own multitask models, each declared by import path (docs/extending.md, "A model").

    models:
      two_expert:                            # its name: letters, digits and `_` (it goes into stage names)
        class: own_model.nets:TwoExpertMMoE  # `package.module:Class`, importable (PYTHONPATH)
        label: Two-expert MMoE               # the tables' and figures' row name (shown with " (user)")
        hparams:                             # constructor keywords and optimiser, inline ...
          model: {d_embedding: 8, expert_d_hidden: [64, 32], tower_d_hidden: [16], dropout: 0.0}
          optim: {optimizer: adam, lr: 0.001, weight_decay: 1.0e-5, max_epochs: 100}
        # hparams: examples/own_model/hparams.yaml   # ... or a file of its own, outside hparams/
        epochs: true                         # trains in epochs (a learning curve); false: trains itself

Here only what can be checked without importing anything: the keys and their types, the name, the import path's
form, a label no other model has, a file outside hparams/. Importing the class runs the user's code: that happens
when the run matrix is expanded (`python -m multitab.runs`, which checks the class against the model contract:
multitab.models.contract) and when a stage builds the model, never when params.yaml is read. Loading params.yaml
enters the declared models into the registry (multitab.registry.declare).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multitab.config._build import ConfigError, build, optional
from multitab.registry import REGISTRY, USER_MARK, ModelEntry

IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_HPARAMS_KEYS = ("model", "optim", "source")
_HPARAMS_FOLDER = "hparams/"  # the registry's hyperparameter files (multitab.hparams.HPARAMS)


@dataclass(frozen=True)
class ModelDeclaration:
    """One entry of `models:` (its YAML key `class` is `cls` here)."""

    cls: str  # `package.module:Class`
    label: str
    hparams: str | dict[str, Any]  # a file's path (relative to the project), or {model: ..., optim: ...}
    # whether it trains in epochs (a learning curve); left out: true, a torch model's way
    epochs: bool = field(default=True, metadata=optional("true: it trains in epochs"))


def build_models(raw: Any, source: str) -> dict[str, ModelDeclaration]:
    """`models:` read strictly; ConfigError naming the key."""
    where = f"{source}: models"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of model name -> declaration, got {raw!r}")
    out: dict[str, ModelDeclaration] = {}
    for name, entry in raw.items():
        here = f"{where}.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{here}: expected a mapping with class, label, hparams (and epochs), got {entry!r}")
        if "cls" in entry:
            raise ConfigError(f"{here}.cls: unknown key; the class is given as `class: package.module:Class`")
        if "class" not in entry:
            raise ConfigError(f"{here}: missing key 'class' (`package.module:Class`)")
        renamed = {("cls" if k == "class" else k): v for k, v in entry.items()}
        try:
            declaration = build(ModelDeclaration, renamed, here)
        except ConfigError as e:
            raise ConfigError(str(e).replace(f"{here}.cls", f"{here}.class")) from None
        _check(declaration, here)
        out[str(name)] = declaration
    return out


def _check(d: ModelDeclaration, here: str) -> None:
    if not IMPORT_PATH.fullmatch(d.cls):
        raise ConfigError(f"{here}.class: {d.cls!r} is not an import path `package.module:Class` (the module as "
                          "`import` spells it, a colon, the class's name)")
    if not d.label.strip():
        raise ConfigError(f"{here}.label: empty; give the name the tables and figures print")
    if isinstance(d.hparams, str):
        path = d.hparams.replace("\\", "/").lstrip("./")
        if path.startswith(_HPARAMS_FOLDER):
            raise ConfigError(f"{here}.hparams: {d.hparams!r} is inside hparams/, the registry's files (written by "
                              "its generators); keep your model's file outside it, e.g. beside its package")
        if not path.endswith((".yaml", ".yml")):
            raise ConfigError(f"{here}.hparams: {d.hparams!r}: expected a YAML file's path (.yaml), or the "
                              "hyperparameters inline as {model: {...}, optim: {...}}")
        return
    extra = sorted(set(d.hparams) - set(_HPARAMS_KEYS))
    if extra:
        raise ConfigError(f"{here}.hparams: unknown key(s) {extra}; known: {list(_HPARAMS_KEYS)}")
    if not isinstance(d.hparams.get("model"), dict):
        raise ConfigError(f"{here}.hparams.model: expected a mapping of constructor keywords (every keyword of "
                          "the class's constructor but `schema`)")


def entries(declared: Mapping[str, ModelDeclaration], source: str) -> dict[str, ModelEntry]:
    """The registry's entries of the declared models (multitab.registry.declare), checked against the registry's
    own: a name or a label a model of the registry has is refused."""
    own = {name: e for name, e in REGISTRY.items() if not e.user}
    labels = {e.label: name for name, e in own.items()}
    out: dict[str, ModelEntry] = {}
    for name, d in declared.items():
        if name in own:
            raise ConfigError(f"{source}: models.{name}: {name} is a model of the registry; give yours another "
                              "name")
        label = d.label.strip() + USER_MARK
        if d.label.strip() in labels or label in labels:
            raise ConfigError(f"{source}: models.{name}.label: {d.label!r} is the label of "
                              f"{labels.get(d.label.strip(), labels.get(label))}; give yours another")
        labels[label] = name
        out[name] = ModelEntry(d.cls, label, None, d.epochs, user=True, hparams=d.hparams, where=f"models.{name}")
    return out
