"""Writes hparams/authors/<dataset>/<model>.yaml from the authors' published selections, once.

    python -m multitab.hparams.authors            # (re)write the files
    python -m multitab.hparams.authors --check    # exit 1, naming the files, when they are not what it writes

The source is hparams/source/authors_configs.yaml: their configs/<dataset>/<model>.yaml, verbatim, in their
keys. `TRANSLATORS[model](entry)` turns one entry into our constructor keywords; every keyword the entry
does not set is written out with the constructor's default, so a file holds every value its model is built
with. A model they published no selection for (XGBoost and MAYA everywhere; the transformers on
MultiTab-Bench) gets its constructor's defaults and the paper's common optimiser settings (`COMMON_OPTIM`),
and its file says so. `multitab_bench_example`, their one MultiTab-Bench configuration, becomes the folder
`multitab_bench`. Protocol `paper`'s changes are not applied in these files (hparams/protocol/paper.yaml); each file
ends with a note of what each protocol changes in it (multitab.hparams.notes), the recipes too.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from multitab.files.io import write_text
from multitab.files.yaml_data import load_yaml, read_yaml_file
from multitab.hparams import BENCH, HPARAMS, NONE_PUBLISHED, Hparams, selection_file, tuples
from multitab.hparams.notes import note, with_note
from multitab.hparams.recipe import recipe_file
from multitab.registry import MODEL_NAMES

SOURCE = f"{HPARAMS}/source/authors_configs.yaml"
THEIR_BENCH = "multitab_bench_example"
# "All models used the Adam optimizer with a weight decay of 1e-5", learning rate 1e-3, 100 epochs (the
# paper's Implementation Details): the optimiser of a model the authors published no selection for.
COMMON_OPTIM = {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-5, "max_epochs": 100}

# mask_mode_if -> our mask names (rows = queries): T->T blocked, F->T blocked, both, none.
_MASKS = {"none": "none", "TxT": "t_t", "FxT": "f_t", "FxT_TxT": "both", "both": "both"}


def inter_sample(arch: dict[str, Any]) -> str:
    """att_type + rope -> our inter_sample mode.

    NOTE[DIFF] (docs/deviations.md P3): their `rope: true` layer attends each sample only to itself; to
    reproduce their published numbers `rope: true` maps to "per_sample_mixing" here; protocol "paper"
    replaces it by "rope_attention" (hparams/protocol/paper.yaml)."""
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
        "head_d_hidden": list(heads),
        "attention_dropout": opt["att_dropout"],
        "ffn_dropout": opt["ff_dropout"],
    }


def _multitab_net(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_transformer(entry),
        "multi_token": arch["multi_token"],
        "mask": _MASKS[arch["mask_mode_if"]],
        "inter_sample": inter_sample(arch),
    }


def _saint(entry: dict[str, Any]) -> dict[str, Any]:
    # NOTE[DIFF] (docs/deviations.md D7): SAINT's `rope: true` uses the same rotary module as MultiTab-Net
    # (its parameter count holds the same d_head / 2 rotary parameters), so it maps to per-sample mixing too.
    return {**_transformer(entry), "inter_sample": inter_sample(entry["architecture"])}


# The MLP family. NOTE[DIFF] (docs/deviations.md D8): an entry without embed_dim (their MultiTab-Bench
# mt_mlp feeds raw inputs) keeps our default embedding (16): the paper embeds the inputs of every baseline.
def _mlp_common(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    common = {"dropout": entry["optimisation"]["dropout"]}
    return {**common, "d_embedding": arch["embed_dim"]} if "embed_dim" in arch else common


def _stl_mlp(entry: dict[str, Any]) -> dict[str, Any]:
    return {**_mlp_common(entry), "d_hidden": list(entry["architecture"]["hidden_dims"])}


def _mtl_shared_bottom(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {**_mlp_common(entry), "shared_d_hidden": list(arch["shared_hidden_dims"]),
            "tower_d_hidden": list(arch["task_hidden_dims"])}


def _mmoe(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {**_mlp_common(entry), "n_experts": arch["num_experts"],
            "expert_d_hidden": list(arch["expert_hidden_dims"]), "tower_d_hidden": list(arch["tower_hidden_dims"])}


def _ple_stem(entry: dict[str, Any]) -> dict[str, Any]:
    arch = entry["architecture"]
    return {
        **_mlp_common(entry),
        "n_layers": arch["num_layers"],
        "n_task_experts": arch["num_task_experts"],
        "n_shared_experts": arch["num_shared_experts"],
        "expert_d_hidden": list(arch["expert_hidden_dims"]),
        "tower_d_hidden": list(arch["tower_hidden_dims"]),
    }


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
}


def constructor_defaults(model: str) -> dict[str, Any]:
    """The keyword defaults of a registered model's constructor (its hyperparameters; not the run's keywords of
    a model that trains itself)."""
    # a model that trains itself takes RUN_KEYWORDS from the run
    from multitab.models import RUN_KEYWORDS, model_class

    cls = model_class(model)
    out: dict[str, Any] = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in ("self", "schema") or p.name in RUN_KEYWORDS or p.kind is not p.KEYWORD_ONLY:
            continue
        if p.default is inspect.Parameter.empty:
            raise ValueError(f"{cls.__name__}.__init__: keyword {p.name!r} has no default; the generator needs one "
                             "for a model without the authors' selection")
        out[p.name] = list(p.default) if isinstance(p.default, tuple) else p.default
    return out


def _is_torch(model: str) -> bool:
    import torch

    from multitab.models import model_class

    return issubclass(model_class(model), torch.nn.Module)


def translate(their: str, model: str, entry: dict[str, Any] | None) -> dict[str, Any]:
    """The file's content for `model` on their dataset key `their` (entry: theirs, None when they published none)."""
    defaults = constructor_defaults(model)
    where = f"{SOURCE}: {their}.{model}"
    if entry is None:
        source: dict[str, Any] = {"authors": f"{NONE_PUBLISHED} for {model} on {their}",
                                  "values": "the constructor's defaults"}
        values = defaults
    else:
        if model not in TRANSLATORS:
            raise ValueError(f"{where}: no translator for {model}; add one to TRANSLATORS")
        values = {**defaults, **TRANSLATORS[model](entry)}
        unknown = sorted(set(values) - set(defaults))
        if unknown:
            raise ValueError(f"{where}: translated to keyword(s) {unknown} the constructor does not take")
        source = {"authors": where, "trained_as": entry.get("trained_as"),
                  "constructor_defaults": sorted(k for k in defaults if k not in TRANSLATORS[model](entry))}
    out: dict[str, Any] = {"model": values}
    if _is_torch(model):
        opt = (entry or {}).get("optimisation") or {}
        out["optim"] = {"optimizer": opt.get("optimizer", COMMON_OPTIM["optimizer"]),
                        "lr": opt.get("lr", COMMON_OPTIM["lr"]),
                        "weight_decay": opt.get("weight_decay", COMMON_OPTIM["weight_decay"]),
                        "max_epochs": opt.get("epochs", COMMON_OPTIM["max_epochs"])}
        if entry is None:
            source["optim"] = "the paper's common settings (Adam, weight decay 1e-5, lr 1e-3, 100 epochs)"
    out["source"] = source
    return out


def render(content: dict[str, Any]) -> str:
    header = (f"# Written by `python -m multitab.hparams.authors` from {SOURCE} (the authors' selection in our\n"
              "# constructor's keywords; protocol `paper` lays hparams/protocol/paper.yaml over it). Regenerate, do\n"
              "# not edit: a different choice belongs in params.yaml (train.model_overrides, train.optim).\n")
    return header + yaml.safe_dump(content, sort_keys=False, default_flow_style=None, width=110)


def _noted(text: str, model: str, root: Path) -> str:
    """A file's `text` ending with the note of what each protocol trains from it (multitab.hparams.notes)."""
    data = load_yaml(text)
    h = Hparams(model=tuples(data["model"]), optim=data.get("optim"))
    return with_note(text, note(h, model, root))


def files(root: Path) -> dict[str, str]:
    """path (relative to `root`) -> text of every file the generator writes: the authors' selections, and the
    note at the end of each recipe (the recipes themselves are written by hand: hparams/README.md)."""
    source = read_yaml_file(root / SOURCE)
    out: dict[str, str] = {}
    for their, entries in source.items():
        folder = BENCH if their == THEIR_BENCH else their
        for model in MODEL_NAMES:
            text = render(translate(their, model, entries.get(model)))
            out[selection_file("authors", folder, model)] = _noted(text, model, root)
    for model in MODEL_NAMES:
        recipe = root / recipe_file(model)
        if recipe.is_file():
            out[recipe_file(model)] = _noted(recipe.read_text(encoding="utf-8"), model, root)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m multitab.hparams.authors", description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("."), help="the project (the folder of params.yaml)")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when a file differs")
    a = p.parse_args(argv)
    wanted = files(a.root)
    if a.check:
        stale = [f for f, text in wanted.items()
                 if not (a.root / f).is_file() or (a.root / f).read_text(encoding="utf-8") != text]
        if stale:
            print(f"not what `python -m multitab.hparams.authors` writes: {stale}", file=sys.stderr)
            return 1
        return 0
    for f, text in wanted.items():
        write_text(a.root / f, text)
    print(f"wrote {len(wanted)} files under {a.root / HPARAMS} (authors/, and the notes of recipe/)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
