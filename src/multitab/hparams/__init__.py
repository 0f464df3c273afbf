"""Hyperparameters as data: one file per selection, dataset and model, in our own vocabulary.

    hparams/<selection>/<dataset>/<model>.yaml

    model:          # the keyword arguments of the model's constructor (multitab.models.<class>), all of them
      d_embedding: 16
      ...
    optim:          # the optimiser and the epochs (none for a model that trains itself: XGBoost)
      optimizer: adam        # adam | adamw
      lr: 0.001
      weight_decay: 1.0e-05
      max_epochs: 100        # train.max_epochs, when set, replaces it
    source: ...     # where the values come from (read by people, not by the training)

- `selection` is `authors` (their published selections, written by `python -m multitab.hparams.authors`
  from hparams/source/authors_configs.yaml) or `swept` (written by the sweep_select stage);
- `dataset` is a dataset's name, or `multitab_bench` for every MultiTab-Bench configuration in the
  authors' selection (they published one example configuration for all of them); a swept file is per
  configuration.

A run reads exactly one file (multitab.runs decides which: its `hparams_file` in runs.yaml), then lays
over it, in this order: a sweep's grid point (`POINT_KEYS`), what params.yaml's `protocol` changes
(hparams/protocol/<protocol>.yaml, data too) and its run group's overlay (`train.optim.<model>`,
`train.model_overrides`, the variant's keywords). A missing file is an error that names it. The resolved
values are what the run's metrics.json records under `hparams`. `python -m multitab.runs` refuses, before it
writes runs.yaml, a file that lacks a keyword of the model's constructor, gives one it does not take or one of
the wrong type, and overlays that do (multitab.runs.check, multitab.hparams.keywords).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multitab.config.train import TrainConfig
from multitab.files.yaml_data import read_yaml_file, short_repr
from multitab.protocol import DEFAULT, check_protocol
from multitab.registry import REGISTRY

HPARAMS = "hparams"  # the folder, relative to the project root (the folder of params.yaml)
BENCH = "multitab_bench"  # the authors' selection's folder for every MultiTab-Bench configuration
SELECTIONS = ("authors", "swept")
OPTIM_KEYS = ("optimizer", "lr", "weight_decay", "max_epochs")
OPTIMIZERS = ("adam", "adamw")
NONE_PUBLISHED = "none published"  # how an authors' file's `source.authors` begins when they published nothing
_FILE_KEYS = ("model", "optim", "source", "selected_by")
# A grid point's axes (multitab.config.runs.PAPER_GRIDS; the paper's names) -> the (section, key) pairs they
# set. `rope` sets `inter_sample` through ROPE (a model without inter-sample attention, "none", keeps none).
POINT_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "lr": (("optim", "lr"),),
    "dropout": (("model", "dropout"),),
    "att_dropout": (("model", "attention_dropout"),),
    "ff_dropout": (("model", "ffn_dropout"),),
    "rope": (("model", "inter_sample"),),
    "max_depth": (("model", "max_depth"),),
    # the paper's grid has one learning-rate axis: XGBoost's binary tasks take the same one
    "learning_rate": (("model", "learning_rate"), ("model", "binary_learning_rate")),
    "n_rounds": (("model", "n_rounds"),),
}
# NOTE[DIFF] (docs/deviations.md P3): the authors' `rope: true` computes per-sample mixing; protocol `paper`
# replaces it by attention across the batch with RoPE (hparams/protocol/paper.yaml).
ROPE = {True: "per_sample_mixing", False: "attention"}


class HparamsError(ValueError):
    """A hyperparameter file is missing keys or has wrong ones; the message names the file."""


def tuples(value: Any) -> Any:
    """YAML lists as tuples (the constructors' sequence keywords, e.g. head_d_hidden: [64] -> (64,))."""
    if isinstance(value, list):
        return tuple(tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: tuples(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Hparams:
    """A run's hyperparameters: the model's constructor keywords, its optimiser settings (None for a model
    that trains itself), the file they were read from and the grid point laid over them."""

    model: dict[str, Any]
    optim: dict[str, Any] | None
    file: str = ""
    point: dict[str, Any] | None = None
    about: dict[str, Any] = field(default_factory=dict, compare=False)  # the file's `source:` (for people)

    @property
    def published(self) -> bool:
        """False for an authors' file that says they published no selection (constructor defaults)."""
        return not str(self.about.get("authors", "")).startswith(NONE_PUBLISHED)

    def with_point(self, point: Mapping[str, Any], sources: dict[str, str] | None = None,
                   where: str = "grid point") -> Hparams:
        """A copy with a sweep's grid point put in its places (POINT_KEYS); `sources`: `section.key` -> where each
        value came from, updated for the values the point sets (`where`: the point's params key)."""
        unknown = sorted(set(point) - set(POINT_KEYS))
        if unknown:
            raise HparamsError(f"grid point {dict(point)}: unknown axis {unknown}; known: {sorted(POINT_KEYS)}")
        model, optim = dict(self.model), None if self.optim is None else dict(self.optim)
        found = {} if sources is None else sources
        for axis, value in point.items():
            for section, key in POINT_KEYS[axis]:
                if section == "optim":
                    if optim is None:
                        raise HparamsError(f"{self.file}: grid axis {axis!r} sets optim.{key}, "
                                           "and the file has no optim")
                    optim[key] = value
                elif axis == "rope":
                    if model.get("inter_sample", "none") == "none":
                        continue
                    model[key] = ROPE[bool(value)]
                else:
                    model[key] = value
                found[f"{section}.{key}"] = f"{where}.{axis}: {short_repr(value)}"
        return Hparams(model, optim, self.file, dict(point))

    def record(self) -> dict[str, Any]:
        """What metrics.json records (`hparams`): the file, its selection, the grid point, the values."""
        parts = Path(self.file).parts
        selection = parts[1] if len(parts) > 2 and parts[0] == HPARAMS else self.file
        return {"file": self.file, "source": "grid point" if self.point else selection, "point": self.point,
                "model": copy.deepcopy(self.model), "optim": copy.deepcopy(self.optim)}


def selection_file(selection: str, dataset: str, model: str) -> str:
    """The file (relative to the project root) of `model` on `dataset` (or BENCH) in `selection`."""
    return f"{HPARAMS}/{selection}/{dataset}/{model}.yaml"


def read(path: Path, shown: str | None = None) -> Hparams:
    """The hyperparameters of one file (multitab.files.yaml_data: data, never code). `shown`: the name errors use."""
    name = shown or str(path)
    if path.is_dir():
        raise IsADirectoryError(f"{name}: is a directory, not a hyperparameter file (a YAML file)")
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}: hyperparameter file not found; write it (the keys of the model's constructor under `model:`, "
            f"the optimiser under `optim:`; docs/extending.md), or regenerate the authors' with "
            f"`python -m multitab.hparams.authors`")
    return parse(read_yaml_file(path), name)


def parse(data: Any, name: str) -> Hparams:
    """The hyperparameters of a file's content (or of a user's model's inline `hparams:`), checked as `read` checks
    a file; `name` names them in errors."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise HparamsError(f"{name}: expected a mapping with `model:` (constructor keywords) and `optim:`")
    extra = sorted(set(data) - set(_FILE_KEYS))
    if extra:
        raise HparamsError(f"{name}: unknown top-level key(s) {extra}; known: {list(_FILE_KEYS)}")
    optim = data.get("optim")
    if optim is not None:
        if not isinstance(optim, dict) or set(optim) != set(OPTIM_KEYS):
            got = sorted(optim) if isinstance(optim, dict) else optim
            raise HparamsError(f"{name}: optim must have exactly the keys {list(OPTIM_KEYS)}, got {got}")
        if optim["optimizer"] not in OPTIMIZERS:
            raise HparamsError(f"{name}: optim.optimizer={short_repr(optim['optimizer'])} must be one of "
                               f"{list(OPTIMIZERS)}")
        numbers = all(isinstance(optim[k], int | float) and not isinstance(optim[k], bool)
                      for k in ("lr", "weight_decay"))
        if (not numbers or optim["lr"] <= 0 or optim["weight_decay"] < 0 or not isinstance(optim["max_epochs"], int)
                or optim["max_epochs"] < 1):
            raise HparamsError(f"{name}: optim: lr must be a number > 0, weight_decay >= 0 and max_epochs an "
                               f"integer >= 1, got {optim}")
        optim = {k: optim[k] for k in OPTIM_KEYS}
    about = data.get("source")
    return Hparams(model=tuples(data["model"]), optim=optim, file=name,
                   about=about if isinstance(about, dict) else {})


def declared(model: str, root: Path) -> Hparams:
    """The hyperparameters of a user's model (params.yaml `models.<name>.hparams`, multitab.registry): its file under
    the project `root`, or the inline mapping."""
    entry = REGISTRY[model.partition("@")[0]]
    if isinstance(entry.hparams, str):
        return read(root / entry.hparams, entry.hparams)
    # named alike whatever path params.yaml was read from: the name is part of every run's record (runs.yaml)
    return parse(copy.deepcopy(dict(entry.hparams or {})), f"params.yaml: {entry.where}.hparams")


def protocol_overlay(root: Path, protocol: str) -> dict[str, Any]:
    """What `protocol` lays over every selection: hparams/protocol/<protocol>.yaml (`optim`: optimiser keys
    for every model that has an optimiser; `model`: model -> constructor keywords; `replace`: keyword ->
    {value: value} for any model)."""
    check_protocol(protocol)
    path = root / HPARAMS / "protocol" / f"{protocol}.yaml"
    shown = f"{HPARAMS}/protocol/{protocol}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{shown}: the protocol's overlay not found (an empty mapping `{{}}` changes nothing)")
    data = read_yaml_file(path) or {}
    if not isinstance(data, dict) or set(data) - {"optim", "model", "replace"}:
        raise HparamsError(f"{shown}: expected a mapping with keys among optim, model, replace")
    optim = data.get("optim") or {}
    if set(optim) - set(OPTIM_KEYS):
        raise HparamsError(f"{shown}: optim: unknown key(s) {sorted(set(optim) - set(OPTIM_KEYS))}")
    return {"optim": optim, "model": data.get("model") or {}, "replace": data.get("replace") or {}, "file": shown}


def apply_protocol(h: Hparams, model: str, overlay: Mapping[str, Any], sources: dict[str, str] | None = None
                   ) -> Hparams:
    """`h` of registry model `model` with a protocol's overlay laid over it (protocol_overlay); `sources` as
    `Hparams.with_point`'s."""
    found = {} if sources is None else sources
    shown = overlay.get("file", "the protocol's overlay")
    values = dict(h.model)
    for key, table in overlay["replace"].items():
        if key in values and values[key] in table:
            found[f"model.{key}"] = f"{shown}: replace.{key} ({values[key]!r} -> {table[values[key]]!r})"
            values[key] = table[values[key]]
    for key, value in overlay["model"].get(model, {}).items():
        values[key] = tuples(value)
        found[f"model.{key}"] = f"{shown}: model.{model}.{key}"
    optim = None if h.optim is None else {**h.optim, **overlay["optim"]}
    if optim is not None:
        found.update({f"optim.{key}": f"{shown}: optim.{key}" for key in overlay["optim"]})
    return Hparams(values, optim, h.file, h.point)


def for_run(root: Path, file: str, *, model: str, dataset: str, point: Mapping[str, Any] | None,
            config: TrainConfig) -> Hparams:
    """The hyperparameters one run trains with: `file` (relative to `root`), its grid point, the protocol's
    overlay and the run group's (`config`, its TrainConfig: `optim.<model>`, `model_overrides`, the variant
    of a run model `<model>@<variant>`)."""
    return resolve(read(root / file, file), protocol_overlay(root, config.protocol), model=model, dataset=dataset,
                   point=point, config=config)


def resolve(h: Hparams, overlay: Mapping[str, Any], *, model: str, dataset: str, point: Mapping[str, Any] | None,
            config: TrainConfig, sources: dict[str, str] | None = None,
            where: Callable[[str], str] = lambda path: f"train.{path}", point_where: str = "grid point") -> Hparams:
    """`for_run` of a file already read (`h`), with the protocol's overlay already read (protocol_overlay).
    `sources` (when given) gets `model.<keyword>` / `optim.<key>` -> where its value came from: the file, the grid
    point, the protocol's overlay, or the params key `where(path)` names for a path of `config` (a TrainConfig
    field: `optim.mmoe.lr`, `model_overrides.saint.n_blocks`, `variants.single_none.overrides.mask`), a grid
    point's values `point_where` (the grid's params key)."""
    found = {} if sources is None else sources
    found.update({f"model.{k}": h.file for k in h.model})
    found.update({f"optim.{k}": h.file for k in h.optim or {}})
    base, variant = config.resolve(model)
    if point:
        h = h.with_point(point, found, point_where)
    h = apply_protocol(h, base, overlay, found)
    values = dict(h.model)
    layers = [(f"model_overrides.{base}", config.model_overrides.get(base, {})),
              (f"model_overrides.{base}@{dataset}", config.model_overrides.get(f"{base}@{dataset}", {})),
              (f"variants.{variant}.overrides", config.variants[variant].overrides if variant else {})]
    for path, overrides in layers:
        for key, value in overrides.items():
            values[key] = tuples(value)
            found[f"model.{key}"] = where(f"{path}.{key}")
    optim = h.optim
    override = config.optim.get(base)
    if optim is not None and override is not None:
        given = {k: getattr(override, k) for k in ("optimizer", "lr", "weight_decay")
                 if getattr(override, k) is not None}
        optim = {**optim, **given}
        found.update({f"optim.{k}": where(f"optim.{base}.{k}") for k in given})
    return Hparams(values, optim, h.file, h.point)


def load(dataset: str, model: str, *, protocol: str = DEFAULT, selection: str = "authors",
         root: Path | None = None) -> Hparams:
    """A selection's hyperparameters of `model` on `dataset` (a real dataset's name, or `multitab_bench`)
    with `protocol`'s overlay, from the project at `root` (default: the working folder), for code outside
    the pipeline: `build_model("mmoe", schema, load("higgs", "mmoe").model)`."""
    root = Path(".") if root is None else root
    file = selection_file(selection, dataset, model)
    return apply_protocol(read(root / file, file), model, protocol_overlay(root, protocol))
