"""The recipe: a model's hyperparameters on data without a tuned file, resolved from the data's shape.

    hparams/recipe/<model>.yaml
      model:       every keyword of the constructor (as a hyperparameter file's `model:`)
      optim:       optimizer, lr, weight_decay, max_epochs (none for a model that trains itself)
      batch_size:  the training batch (none for a model that trains itself)
      shape:       {above_features: 50, model: {d_embedding: 8}}: the values that replace `model:`'s on data
                   with more features than `above_features`
      source:      where each value comes from (the paper's shared setup, or the authors' most common)

    h, batch_size = recipe("mmoe", n_features=60)   # h.model["d_embedding"] == 8; h.record()["source"] == "recipe"

A run of the pipeline on a dataset without its selection's file (hparams/authors/<dataset>/<model>.yaml) reads
its model's recipe (multitab.runs.locate.hparams_file), resolved for the dataset's number of features; its metrics.json
says `recipe` (`hparams.source`).

The files are data, read with the safe, bounded loader (multitab.files.yaml_data); a resolved recipe is
complete and typed as a hyperparameter file must be (multitab.hparams.keywords), or refused naming the file and
the keyword.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from multitab.files.yaml_data import read_yaml_file, short_repr
from multitab.hparams import HPARAMS, OPTIM_KEYS, OPTIMIZERS, Hparams, HparamsError, declared, read, tuples
from multitab.hparams.keywords import problems
from multitab.registry import is_user_model

RECIPE = "recipe"  # the folder under hparams/, and the selection metrics.json records
_KEYS = ("model", "optim", "batch_size", "shape", "source")


def project_root() -> Path:
    """The folder holding hparams/ for code outside the pipeline: this source checkout's."""
    return Path(__file__).resolve().parents[3]


def recipe_file(model: str) -> str:
    """The recipe file of registered `model`, relative to the project root."""
    return f"{HPARAMS}/{RECIPE}/{model}.yaml"


def recipe(model: str, n_features: int, *, root: Path | None = None) -> tuple[Hparams, int | None]:
    """The hyperparameters (the file's `model:` with its `shape:` applied for `n_features` features; its `optim:`)
    and the batch size of registered `model`'s recipe in the project at `root` (default: `project_root()`)."""
    shown = recipe_file(model)
    path = (project_root() if root is None else root) / shown
    if not path.is_file():
        raise FileNotFoundError(f"{shown}: recipe not found (one file per registered model: hparams/README.md)")
    data = read_yaml_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise HparamsError(f"{shown}: expected a mapping with `model:` (constructor keywords)")
    extra = sorted(set(data) - set(_KEYS))
    if extra:
        raise HparamsError(f"{shown}: unknown top-level key(s) {extra}; known: {list(_KEYS)}")
    values = dict(data["model"])
    shape = data.get("shape") or {}
    if shape:
        above = shape.get("above_features")
        if (set(shape) != {"above_features", "model"} or not isinstance(above, int)
                or not isinstance(shape["model"], dict)):
            raise HparamsError(f"{shown}: shape must be {{above_features: <integer>, model: {{keyword: value}}}}, "
                               f"got {shape}")
        if n_features > above:
            values.update(shape["model"])
    wrong = problems(model, tuples(values))
    if wrong:
        raise HparamsError(f"{shown}: model.{wrong[0][0]}: {wrong[0][1]}")
    optim = data.get("optim")
    if optim is not None:
        if not isinstance(optim, dict) or set(optim) != set(OPTIM_KEYS) or optim["optimizer"] not in OPTIMIZERS:
            raise HparamsError(f"{shown}: optim must have exactly the keys {list(OPTIM_KEYS)}, optimizer one of "
                               f"{list(OPTIMIZERS)}; got {optim}")
        optim = {k: optim[k] for k in OPTIM_KEYS}
    batch_size = data.get("batch_size")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise HparamsError(f"{shown}: batch_size must be an integer >= 1, got {short_repr(batch_size)}")
    about: Any = data.get("source")
    return Hparams(model=tuples(values), optim=optim, file=shown, about=about if isinstance(about, dict) else {}), \
        batch_size


def is_recipe(file: str) -> bool:
    """Whether a run's file (relative to the project root) is a recipe."""
    return file.startswith(f"{HPARAMS}/{RECIPE}/")


def read_run_file(root: Path, file: str, model: str, n_features: Callable[[], int]) -> Hparams:
    """The hyperparameters of a run's file: a recipe resolved for the run's data (`n_features()`: its number of
    features; the pipeline's batch is train.batch_size); a user's model's own (outside hparams/: its declaration's
    file, or its package when they are inline in params.yaml; multitab.hparams.declared); any other file as
    multitab.hparams.read reads it."""
    if is_user_model(model) and not file.startswith(f"{HPARAMS}/"):
        return declared(model, root)
    if is_recipe(file):
        return recipe(model.partition("@")[0], n_features(), root=root)[0]
    return read(root / file, file)


def n_features(dataset: str, params: Any = None) -> int:
    """The number of features of a dataset of `datasets:` (its schema's; a declared one's: every column of its file
    but the tasks and `drop`, read from the file's header, multitab.datasets.declared), which its runs' recipes are
    resolved for. `params`: the project's multitab.config.Params, which declares the datasets."""
    from multitab.config import ConfigError
    from multitab.datasets.schema import get_schema

    datasets = params.datasets if params is not None and "datasets" in params.sections else {}
    if dataset in datasets and datasets[dataset].declared:
        from multitab.datasets.declared import n_features as declared_features

        try:
            return declared_features(dataset, datasets[dataset], Path(params.source).parent)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{params.source}: {e} (its runs' recipe needs its number of features)") from None
    try:
        return len(get_schema(dataset).features)
    except KeyError as e:
        raise ConfigError(f"{e.args[0]}: its runs' recipe needs its number of features") from None
