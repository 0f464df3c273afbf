"""The complexity stage's table: every model's parameters and forward FLOPs per sample on every dataset, beside the
paper's Table 4 (the counting itself, with Table 4's convention: multitab.models.counting)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from multitab.datasets.schema import DatasetSchema
from multitab.models.counting import complexity, count_macs, example_inputs
from multitab.registry import REGISTRY

__all__ = ["PAPER_TABLE4", "complexity", "complexity_rows", "count_macs", "example_inputs", "paper_table4"]

log = logging.getLogger(__name__)

def paper_table4() -> dict[tuple[str, str], tuple[float, float]]:
    """The paper's Table 4, (registry name, dataset) -> (params, FLOPs) in millions, read from the published
    CSV shipped with the package (multitab.evaluation.paper.published)."""
    from multitab.evaluation.paper.published import load_published

    # the published table names a model by its label (published/paper_table4_params_flops.csv)
    names = {entry.label: name for name, entry in REGISTRY.items()}
    return {(names[label], ds): v for (label, ds), v in load_published().table4.items()}


PAPER_TABLE4 = paper_table4()


def complexity_rows(
    schemas: dict[str, DatasetSchema],
    models: dict[str, Callable[[DatasetSchema], Any]],
    *,
    batch_size: int = 1,
    standin: dict[str, bool] | None = None,
) -> list[dict[str, Any]]:
    """One row per dataset x model: params, FLOPs (and millions), the batch size counted, the paper's
    Table 4 figures where it has them, and whether the dataset's schema came from stand-in data."""
    rows = []
    for ds, schema in schemas.items():
        for name, make in models.items():
            c = complexity(make(schema), schema, batch_size=batch_size)
            paper = PAPER_TABLE4.get((name, ds), (None, None))
            rows.append(
                {
                    "dataset": ds,
                    "model": name,
                    "params": c["params"],
                    "flops": None if c["flops"] is None else int(round(c["flops"])),
                    "params_millions": None if c["params"] is None else round(c["params"] / 1e6, 3),
                    "flops_millions": None if c["flops"] is None else round(c["flops"] / 1e6, 3),
                    "paper_params_millions": paper[0],
                    "paper_flops_millions": paper[1],
                    "batch_size": c["batch_size"],
                    "standin": bool((standin or {}).get(ds, False)),
                }
            )
            log.info("%s/%s: %s params, %s FLOPs", ds, name, c["params"], c["flops"])
    return rows
