"""The model registry: one entry per model, everything the pipeline needs to know of it by name, readable
without importing torch (params.yaml is checked against the names before any stage runs). Adding a model:
its class, one entry here, and its hyperparameter files (docs/extending.md).

An entry holds the class as `module:Class` (multitab.models imports it: `MODELS`), the label the tables and
figures print (the paper's row name where the paper has the model: the published values are matched by it),
its tiny test configuration (the model contract's tests build it with these keywords over the authors'
MultiTab-Bench file) and whether it trains in epochs (a learning curve). The tables list the paper's models in
the paper's order, then the others in the registry's (`table_order`). Figures colour a model by its name
(multitab.evaluation.figures: the registered ones fixed, any other name by its hash), so a new model needs no
colour.

The dataset registry: the names of the datasets with a schema (multitab.datasets.schema.SCHEMAS, in its
order), here so that the config package, below the datasets package, can check params.yaml against them. A task's
name in a file name: `file_key` (a declared dataset's tasks are its file's column names).

A user's model: params.yaml's `models:` declares a model of the user's own package by import path
(multitab.config.models); loading params.yaml enters each as an entry here (`declare`), after the registry's own,
labelled as the user's (`USER_MARK`), so that it goes wherever a model of the registry goes (the run matrix, the
tables, the complexity table, the study). The entries of one params file replace those of the one loaded before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelEntry:
    cls: str  # `module:Class`
    label: str  # as tables and figures print it; the paper's row name for a model of the paper
    # constructor keywords small enough for the model contract's tests (tests/_models_tiny.py); None for a model
    # that is no torch module (XGBoost: its own test file)
    tiny: Mapping[str, Any] | None = field(default=None, compare=False)
    epochs: bool = True  # trains in epochs (a learning curve); False: boosting rounds
    # a user's model (params.yaml `models:`): its hyperparameters, a file's path (relative to the project) or the
    # inline mapping {model: ..., optim: ...}, and its key in params.yaml (`models.<name>`)
    user: bool = field(default=False, compare=False)
    hparams: str | Mapping[str, Any] | None = field(default=None, compare=False)
    where: str = field(default="", compare=False)


_TRANSFORMER = {"d_embedding": 8, "n_blocks": 1, "n_heads": 2, "ffn_d_hidden": 16, "head_d_hidden": (16,)}
_EXTRACTION = {"d_embedding": 4, "n_layers": 2, "n_task_experts": 1, "n_shared_experts": 2, "expert_d_hidden": (32, 16)}

REGISTRY: dict[str, ModelEntry] = {
    "multitab_net": ModelEntry("multitab.models.multitab_net:MultiTabNet", "MultiTab-Net", _TRANSFORMER),
    "tab_transformer": ModelEntry("multitab.models.tab_transformer:TabTransformer", "TabT", _TRANSFORMER),
    "ft_transformer": ModelEntry("multitab.models.ft_transformer:FTTransformer", "FT-T", _TRANSFORMER),
    "saint": ModelEntry("multitab.models.saint:SAINT", "SAINT", _TRANSFORMER),
    "stl_mlp": ModelEntry("multitab.models.stl_mlp:STLMLP", "STL", {"d_embedding": 4, "d_hidden": (32, 16)}),
    "mtl_shared_bottom": ModelEntry("multitab.models.mtl_shared_bottom:MTLSharedBottom", "MTL",
                                    {"d_embedding": 4, "shared_d_hidden": (32, 16), "tower_d_hidden": (8,)}),
    "mmoe": ModelEntry("multitab.models.mmoe:MMoE", "MMoE",
                       {"d_embedding": 4, "n_experts": 3, "expert_d_hidden": (32, 16), "tower_d_hidden": (8,)}),
    "ple": ModelEntry("multitab.models.ple:PLE", "PLE", _EXTRACTION),
    "stem": ModelEntry("multitab.models.stem:STEM", "STEM", _EXTRACTION),
    "maya": ModelEntry("multitab.models.maya:MAYA", "MAYA", {"d_embedding": 8, "n_heads": 2, "n_branches": 3,
                                                             "ffn_d_hidden": 16, "decoder_ffn_d_hidden": 16}),
    "xgboost": ModelEntry("multitab.models.xgboost_model:XGBoost", "XGB", epochs=False),
}
# The rows of the paper's Table 3, in its order (the published tables' columns, evaluation/paper/published/):
# a fact of the paper, not a list a new model joins
PAPER_ROWS = ("STL", "MTL", "MMoE", "PLE", "TabT", "FT-T", "SAINT", "XGB", "STEM", "MultiTab-Net")

MODEL_CLASSES: dict[str, str] = {name: entry.cls for name, entry in REGISTRY.items()}
MODEL_NAMES: tuple[str, ...] = tuple(REGISTRY)


USER_MARK = " (user)"  # after a user's model's label in the tables and figures


def declare(entries: Mapping[str, ModelEntry]) -> None:
    """Make `entries` (name -> a user's model, `user=True`) the user's models of the registry, in their order after
    the registry's own, in place of those declared before (params.yaml's `models:`, multitab.config)."""
    clash = sorted(n for n in entries if n in REGISTRY and not REGISTRY[n].user)
    if clash:
        raise ValueError(f"{clash}: a model of the registry has that name")
    for name in [n for n, e in REGISTRY.items() if e.user]:
        del REGISTRY[name]
    REGISTRY.update(entries)


def user_models() -> dict[str, ModelEntry]:
    """The user's models declared now (name -> entry), in their order."""
    return {name: entry for name, entry in REGISTRY.items() if entry.user}


def is_user_model(model: str) -> bool:
    """Whether a run name's model (`<model>` or `<model>@<variant>`) is a user's model declared now."""
    entry = REGISTRY.get(model.partition("@")[0])
    return entry is not None and entry.user


def table_order(names: Mapping[str, ModelEntry] | None = None) -> tuple[str, ...]:
    """The registry's names in the tables' row order: the paper's models as the paper lists them, then the
    others in the registry's order. `names`: the registry (None: `REGISTRY` as it is now)."""
    names = REGISTRY if names is None else names
    rank = {label: i for i, label in enumerate(PAPER_ROWS)}
    return tuple(sorted(names, key=lambda n: rank.get(names[n].label, len(rank))))  # sorted is stable


def label(model: str) -> str:
    """The label of a run name: a registered model's label, variants keeping their suffix
    (`multitab_net@single_none` -> `MultiTab-Net@single_none`); an unregistered name as it is."""
    base, _, variant = model.partition("@")
    entry = REGISTRY.get(base)
    text = entry.label if entry is not None else base
    return f"{text}@{variant}" if variant else text


def trains_in_epochs(model: str) -> bool:
    """Whether the run name's model trains in epochs (False: XGBoost's boosting rounds: no learning curve)."""
    entry = REGISTRY.get(model.partition("@")[0])
    return entry is None or entry.epochs


DATASET_NAMES: tuple[str, ...] = ("aliexpress", "acs_income", "higgs")


_UNSAFE_IN_NAMES = str.maketrans({"/": "\u2215", "\\": "\u2215", **{chr(c): "\ufffd" for c in (*range(32), 127)}})


def file_key(name: str) -> str:
    """`name` (a task: a declared dataset's column, spelt as its file spells it) as one file name in one folder: a
    `/` or `\\` becomes a division slash (U+2215), which no path splits on, a control character U+FFFD, and `.` /
    `..` (or nothing) get a one-dot leader (U+2024) after them; other names are unchanged."""
    key = name.translate(_UNSAFE_IN_NAMES)
    return key + "\u2024" if key in ("", ".", "..") else key
