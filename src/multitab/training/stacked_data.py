"""The members' data of a stacked run: one dataset shared by all (seeds of one run), or datasets of one shape.

    rows = stack_data(datas, device)     # datas: one ProcessedData per member (the same object where shared)
    rows.split, rows.dataset_of[m]       # the training tensors, member m's dataset in their leading axis

Members may differ in their data when the data have one shape: the same features (names, kinds,
cardinalities), the same tasks (names, types, classes) and the same number of training rows (validation
and test are per member, so their sizes may differ; so may everything the values say: target statistics,
the rows themselves). The training splits of the distinct datasets are stacked once along a new leading
axis; each member's own split becomes a view of its slice (nothing is held twice), and a stacked batch
gathers member m's rows from slice `dataset_of[m]`. Members of one dataset (the seeds of one run) share it
as it is: one split, no leading axis, no copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from multitab.datasets.schema import DatasetSchema
from multitab.training.data import ProcessedData, TensorSplit, place

__all__ = ["StackData", "check_same_shape", "schema_shape", "stack_data"]


@dataclass
class StackData:
    """The training rows of a stack: `split` is the shared training split when `dataset_of` is None, else
    each of its tensors holds the distinct datasets' training tensors stacked (dataset d at index d) and
    member m trains on slice `dataset_of[m]`. `datas` is each member's ProcessedData (validation, test)."""

    datas: list[ProcessedData]
    split: TensorSplit
    dataset_of: list[int] | None
    n_train: int


def schema_shape(schema: DatasetSchema) -> dict[str, object]:
    """What a model built for `schema` takes from it: the features' names, kinds and cardinalities, the tasks'
    names, types and classes (not the dataset's name, statistics or value ranges)."""
    return {"features": [(f.name, f.kind, f.cardinality) for f in schema.features],
            "tasks": [(t.name, t.type, t.n_classes) for t in schema.tasks]}


def _shape(data: ProcessedData) -> dict[str, object]:
    return {**schema_shape(data.schema), "training rows": len(data.splits["train"])}


def check_same_shape(datas: Sequence[ProcessedData]) -> None:
    """ValueError naming the first difference when the distinct datasets of `datas` are not of one shape
    (module docstring): they could not train as one stack."""
    first = datas[0]
    reference = _shape(first)
    for data in datas[1:]:
        if data is first:
            continue
        shape = _shape(data)
        for key, want in reference.items():
            got = shape[key]
            if got == want:
                continue
            if isinstance(want, list) and isinstance(got, list):
                if len(got) != len(want):
                    detail = f"{len(want)} vs {len(got)} {key}"
                else:
                    a, b = next((a, b) for a, b in zip(want, got) if a != b)
                    detail = f"{key}: {a} vs {b}"
            else:
                detail = f"{want} vs {got} {key}"
            raise ValueError(f"stacked members' data differ in shape ({first.path} vs {data.path}): {detail}; "
                             "only data of one shape (features, tasks, training rows) stack")


def stack_data(datas: Sequence[ProcessedData], device: torch.device) -> StackData:
    """Every member's splits placed on `device` (`data.place`), each distinct dataset's once; with more than one
    distinct dataset their training splits stacked once (each member's own training split then a view of its
    slice). Checks the shape first (`check_same_shape`)."""
    check_same_shape(datas)
    distinct: list[ProcessedData] = []
    for data in datas:
        if not any(data is d for d in distinct):
            distinct.append(data)
    if len(distinct) == 1:
        data = distinct[0]
        data.splits = {k: place(v, device) for k, v in data.splits.items()}
        return StackData(list(datas), data.splits["train"], None, len(data.splits["train"]))
    trains = [d.splits["train"] for d in distinct]
    first = trains[0]
    def stack(key: str) -> torch.Tensor:
        return torch.stack([getattr(t, key).to(first.device) for t in trains])

    stacked = place(TensorSplit(stack("x_num"), stack("x_cat"), stack("y_float"), stack("y_long"),
                                first.float_tasks, first.long_tasks), device)
    for i, data in enumerate(distinct):
        own = TensorSplit(stacked.x_num[i], stacked.x_cat[i], stacked.y_float[i], stacked.y_long[i],
                          first.float_tasks, first.long_tasks)
        data.splits = {"train": own, **{k: place(v, device) for k, v in data.splits.items() if k != "train"}}
    index = [next(i for i, d in enumerate(distinct) if d is data) for data in datas]
    return StackData(list(datas), stacked, index, len(first))
