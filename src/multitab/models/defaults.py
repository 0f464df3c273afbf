"""The one place where the authors' selected configurations become our constructor keywords.

``SELECTED_HPARAMS`` (their keys, verbatim; data: selected_hparams.yaml beside this module, shipped with
the package) is keyed by dataset and model; datasets outside it (the
MultiTab-Bench configurations) use its ``multitab_bench_example`` entries; a model without an entry
there gets its constructor defaults (the paper's common settings: e = 16, FFN 256, 4 heads).

``TRANSLATORS[model](entry) -> constructor kwargs`` turns one entry into keyword arguments;
``training_defaults`` gives the optimisation settings the trainer uses. The MLP-family translators
(STL, shared bottom, MMoE, PLE, STEM) sit beside the transformers'.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from multitab.io import load_yaml
from multitab.protocol import model_overrides, optim_overrides

log = logging.getLogger(__name__)

BENCH_KEY = "multitab_bench_example"
# dataset -> model -> {architecture, optimisation, trained_as}; yaml.safe_load: data, never code.
SELECTED_HPARAMS: dict[str, dict[str, dict[str, Any]]] = load_yaml(
    resources.files("multitab.models").joinpath("selected_hparams.yaml").read_text(encoding="utf-8"))

# mask_mode_if -> our mask names (rows = queries): T->T blocked, F->T blocked, both, none.
_MASKS = {"none": "none", "TxT": "t_t", "FxT": "f_t", "FxT_TxT": "both", "both": "both"}


def _inter_sample(arch: dict[str, Any]) -> str:
    """att_type + rope -> our inter_sample mode.

    NOTE[DIFF] (docs/deviations.md P3): their `rope: true` layer attends each sample only to itself;
    to reproduce their published numbers `rope: true` maps to "per_sample_mixing" here; protocol
    "paper" replaces it by "rope_attention" (multitab.protocol)."""
    if arch.get("att_type", "row_col") == "col":
        return "none"
    return "per_sample_mixing" if arch.get("rope", False) else "attention"


def _transformer(entry: dict[str, Any]) -> dict[str, Any]:
    arch, opt = entry["architecture"], entry["optimisation"]
    heads = arch.get("tower_hid_dims", arch.get("tower_hidden_dims"))
    return {
        "d_embedding": arch["embed_dim"],
        "n_blocks": arch["n_blocks"],
        "n_heads": arch["n_heads"],
        "ffn_d_hidden": arch["ff_hid_dim"],
        "head_d_hidden": tuple(heads),
        "attention_dropout": opt["att_dropout"],
        "ffn_dropout": opt["ff_dropout"],
    }


def _multitab_net(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_transformer(entry),
        "multi_token": arch["multi_token"],
        "mask": _MASKS[arch["mask_mode_if"]],
        "inter_sample": _inter_sample(arch),
    }


def _saint(entry: dict[str, Any]) -> dict[str, Any]:
    # NOTE[DIFF] (docs/deviations.md D7): SAINT's `rope: true` uses the same rotary module as
    # MultiTab-Net (its parameter count holds the same d_head / 2 rotary parameters), so it maps to
    # per-sample mixing as well.
    return {**_transformer(entry), "inter_sample": _inter_sample(entry["architecture"])}


# The MLP family. NOTE[DIFF] (docs/deviations.md D8): an entry without embed_dim (their
# MultiTab-Bench mt_mlp feeds raw inputs) keeps our default embedding (16): the paper embeds the inputs
# of every baseline.
def _mlp_common(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    common = {"dropout": entry["optimisation"]["dropout"]}
    return {**common, "d_embedding": arch["embed_dim"]} if "embed_dim" in arch else common


def _stl_mlp(entry: dict[str, Any]) -> dict[str, Any]:
    return {**_mlp_common(entry), "d_hidden": tuple(entry["architecture"]["hidden_dims"])}


def _mtl_shared_bottom(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_mlp_common(entry),
        "shared_d_hidden": tuple(arch["shared_hidden_dims"]),
        "tower_d_hidden": tuple(arch["task_hidden_dims"]),
    }


def _mmoe(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_mlp_common(entry),
        "n_experts": arch["num_experts"],
        "expert_d_hidden": tuple(arch["expert_hidden_dims"]),
        "tower_d_hidden": tuple(arch["tower_hidden_dims"]),
    }


def _ple_stem(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_mlp_common(entry),
        "n_layers": arch["num_layers"],
        "n_task_experts": arch["num_task_experts"],
        "n_shared_experts": arch["num_shared_experts"],
        "expert_d_hidden": tuple(arch["expert_hidden_dims"]),
        "tower_d_hidden": tuple(arch["tower_hidden_dims"]),
    }


def _xgboost(entry: dict[str, Any]) -> dict[str, Any]:
    """A swept XGBoost selection (the authors publish none): max depth, one learning rate for every
    booster (the paper's grid has one learning-rate axis) and the number of rounds."""
    arch, opt = entry.get("architecture", {}), entry.get("optimisation", {})
    out: dict[str, Any] = {}
    if "max_depth" in arch:
        out["max_depth"] = int(arch["max_depth"])
    if "learning_rate" in opt:
        out["learning_rate"] = out["binary_learning_rate"] = float(opt["learning_rate"])
    if "n_rounds" in opt:
        out["n_rounds"] = int(opt["n_rounds"])
    return out


TRANSLATORS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "multitab_net": _multitab_net,
    "saint": _saint,
    "ft_transformer": _transformer,
    "tab_transformer": _transformer,
    "stl_mlp": _stl_mlp,
    "mtl_shared_bottom": _mtl_shared_bottom,
    "mmoe": _mmoe,
    "ple": _ple_stem,
    "stem": _ple_stem,
    "xgboost": _xgboost,
}
# Where a grid point's coordinate goes in a selection entry (their keys; multitab.config.runs.PAPER_GRIDS' axes).
POINT_SECTIONS = {
    "lr": "optimisation", "dropout": "optimisation", "att_dropout": "optimisation", "ff_dropout": "optimisation",
    "rope": "architecture", "max_depth": "architecture", "learning_rate": "optimisation", "n_rounds": "optimisation",
}
Selections = Mapping[str, Mapping[str, dict[str, Any]]]  # dataset -> model -> entry (their format)


def config_key(dataset: str) -> str:
    """The SELECTED_HPARAMS key used for a dataset name."""
    return dataset if dataset in SELECTED_HPARAMS else BENCH_KEY


def selected_entry(dataset: str, model: str, selections: Selections | None = None) -> dict[str, Any] | None:
    """The selection entry of `model` on `dataset`: `selections[dataset][model]` (a sweep's, see
    multitab.evaluation.sweep) where it has one, else the authors' (None: they published none)."""
    if selections is not None and model in (selections.get(dataset) or {}):
        return selections[dataset][model]
    return SELECTED_HPARAMS[config_key(dataset)].get(model)


def apply_point(entry: dict[str, Any] | None, point: Mapping[str, Any], *, model: str, dataset: str) -> dict[str, Any]:
    """A copy of selection `entry` with a grid point's coordinates (multitab.config.runs.PAPER_GRIDS axes) put in
    their places: lr / dropouts / XGBoost's learning rate and rounds in `optimisation`, rope and max depth
    in `architecture`. The rest of the entry (architecture, optimizer, weight decay) stays the selection's."""
    unknown = sorted(set(point) - set(POINT_SECTIONS))
    if unknown:
        raise ValueError(f"grid point {dict(point)}: unknown key(s) {unknown}; known: {sorted(POINT_SECTIONS)}")
    if entry is None and model != "xgboost":
        raise ValueError(f"{model} on {dataset}: no selection to sweep from (the authors published none for this "
                         f"dataset or the MultiTab-Bench example); sweep a model that has one")
    out = copy.deepcopy(entry) if entry is not None else {}
    for key, value in point.items():
        out.setdefault(POINT_SECTIONS[key], {})[key] = value
    return out


def model_defaults(dataset: str, model: str, protocol: str,
                   entry: dict[str, Any] | None | str = "authors") -> dict[str, Any]:
    """Constructor keywords of `model` at a selected configuration for `dataset` (`entry`; by default the
    authors'), with what `protocol` changes on top (multitab.protocol; "authors_code": the configuration
    verbatim)."""
    key = config_key(dataset)
    if isinstance(entry, str):
        entry = SELECTED_HPARAMS[key].get(model)
    if entry is None or model not in TRANSLATORS:
        log.info("no selected configuration for %s on %s: constructor defaults", model, dataset)
        return {}
    return {**TRANSLATORS[model](entry), **model_overrides(protocol, key, model, entry)}


def training_defaults(dataset: str, model: str, protocol: str,
                      entry: dict[str, Any] | None | str = "authors") -> dict[str, Any]:
    """lr, weight_decay, optimizer and max_epochs for (dataset, model) (batch size and early-stopping
    patience are params.yaml's `train`); the paper's common settings (Adam, wd 1e-5, lr 1e-3, 100 epochs)
    where no entry exists; protocol
    "paper" puts the paper's optimizer and weight decay over their selection (multitab.protocol)."""
    if isinstance(entry, str):
        entry = SELECTED_HPARAMS[config_key(dataset)].get(model)
    opt = entry.get("optimisation", {}) if entry else {}
    return {
        "lr": opt.get("lr", 1e-3),
        "weight_decay": opt.get("weight_decay", 1e-5),
        "optimizer": opt.get("optimizer", "adam"),
        "max_epochs": opt.get("epochs", 100),
    } | optim_overrides(protocol)
