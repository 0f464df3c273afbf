"""Where a run's pieces are, by name: the data names of each kind that params.yaml declares, a sweep's grid
points, the one hyperparameter file a run reads (multitab.hparams) and its model's source (a DVC dependency of its
stage)."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, Params
from multitab.hparams import BENCH, selection_file
from multitab.hparams.recipe import recipe_file
from multitab.registry import DATASET_NAMES, REGISTRY

MODELS_CODE = "src/multitab/models"  # the registry's models' source, a dependency of every train stage already


def grid_points(grid: Mapping[str, Sequence[Any]]) -> Iterator[dict[str, Any]]:
    """Every point of `grid` in its order (the first axis varies slowest)."""
    axes = list(grid)
    for values in itertools.product(*(grid[a] for a in axes)):
        yield dict(zip(axes, values))


def data_names(params: Params) -> dict[str, tuple[str, ...]]:
    """Every name of each data kind: the real datasets, the MultiTab-Bench and the study configurations."""
    return {
        "datasets": tuple(params.datasets) if "datasets" in params.sections else (),
        "bench": tuple(params.bench.configs) if "bench" in params.sections else (),
        "study": tuple(params.study.configs) if "study" in params.sections else (),
        "attribution": tuple(params.attribution.configs) if "attribution" in params.sections else (),
    }


def hparams_file(selection: str, kind: str, dataset: str, model: str, root: Path | None = None) -> str:
    """The one hyperparameter file of a run (multitab.hparams): the selection's (`swept`: hparams/swept/, per
    dataset or configuration, written by a sweep; `authors`: their MultiTab-Bench folder for every MultiTab-Bench
    and study configuration). A dataset declared in params.yaml (no schema in the registry: the authors published
    nothing for it) trains with its model's recipe (multitab.hparams.recipe) when the authors' folder (under the
    project `root`, when given) has no file for it. No other fallback: a paper's dataset without its authors' file,
    or a swept file that does not exist, is refused when the run is resolved (multitab.runs.resolve). A grid point
    starts from the authors' (selection `authors`), or the recipe. A user's model (params.yaml `models:`) reads its
    declaration's file; with its hyperparameters inline in params.yaml, the run's file is its package
    (`package_path`: a dependency that changes with its code, read as the declaration's values:
    multitab.hparams.recipe.read_run_file)."""
    base = model.partition("@")[0]
    if selection == "swept":
        return selection_file("swept", dataset, base)
    entry = REGISTRY.get(base)
    if entry is not None and entry.user:  # a user's model: its declaration's file, or (inline) its package
        return entry.hparams if isinstance(entry.hparams, str) else package_path(entry.cls, root or Path("."))
    file = selection_file("authors", BENCH if kind in ("bench", "study") else dataset, base)
    if (root is not None and kind == "datasets" and dataset not in DATASET_NAMES and not (root / file).exists()
            and (root / recipe_file(base)).is_file()):
        return recipe_file(base)
    return file



def model_code(params: Params, model: str) -> str:
    """The source of a run model's class, as the run's stage depends on it: a user's model's package (`package_path`),
    MODELS_CODE for the registry's."""
    entry = REGISTRY.get(model.partition("@")[0])
    if entry is None or not entry.user:
        return MODELS_CODE
    return package_path(entry.cls, Path(params.source).parent)


def package_path(import_path: str, root: Path) -> str:
    """The folder of the top-level package of `import_path` (`package.module:Class`), or its module's file for a
    module of no package: relative to the project `root` when inside it, else absolute. Found on the Python path
    without importing anything (importlib.util.find_spec of the top-level name); ConfigError when it is not there."""
    top = import_path.partition(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    found = locations[0] if locations else spec.origin if spec is not None else None
    if found is None or found in ("built-in", "frozen"):
        raise ConfigError(f"{import_path}: module {top!r} not found on the Python path: put the folder that holds "
                          "its package on PYTHONPATH (or pip install it), in every shell that runs the pipeline")
    path = Path(found).resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()
