"""Where a run's pieces are, by name: the data names of each kind that params.yaml declares, a sweep's grid
points, and the one hyperparameter file a run reads (multitab.hparams)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config import Params
from multitab.hparams import BENCH, selection_file
from multitab.hparams.recipe import recipe_file
from multitab.registry import DATASET_NAMES


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
    starts from the authors' (selection `authors`), or the recipe."""
    base = model.partition("@")[0]
    if selection == "swept":
        return selection_file("swept", dataset, base)
    file = selection_file("authors", BENCH if kind in ("bench", "study") else dataset, base)
    if (root is not None and kind == "datasets" and dataset not in DATASET_NAMES and not (root / file).exists()
            and (root / recipe_file(base)).is_file()):
        return recipe_file(base)
    return file

