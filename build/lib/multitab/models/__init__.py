"""The model zoo: every model of the MultiTab study behind one interface (see base.py for the
contract: constructor ``Model(*, schema, **hyperparameters)``, ``forward(x_num, x_cat) -> {task:
Tensor}``, the optional ``training_loss`` / ``fit_context`` hooks, and ``fit`` / ``predict`` for
non-torch models).

``build_model(name, schema, hparams)`` builds a registered model with the constructor keywords `hparams`
(nothing implied: the pipeline's come from one hyperparameter file per run, multitab.hparams; in a
notebook, ``multitab.hparams.load(dataset, name).model`` gives the authors' selection under the default
protocol). The registry is multitab.names.MODEL_CLASSES: multitab_net, stl_mlp, mtl_shared_bottom, mmoe,
ple, stem, tab_transformer, ft_transformer, saint, maya, xgboost.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.names import MODEL_CLASSES


def _import(path: str) -> type[Any]:
    module, _, name = path.partition(":")
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


# name -> class, in the registry's order (tests add their tiny models here for one test)
MODELS: dict[str, type[Any]] = {name: _import(path) for name, path in MODEL_CLASSES.items()}


def as_schema(schema: DatasetSchema | Mapping[str, Any]) -> DatasetSchema:
    """A DatasetSchema, or a processed meta.json dict turned into one."""
    if isinstance(schema, DatasetSchema):
        return schema
    if isinstance(schema, Mapping) and "features" in schema and "tasks" in schema:
        return schema_from_meta(schema)
    raise TypeError(f"schema must be a DatasetSchema or a meta.json dict, got {type(schema).__name__}")


def hyperparameters(name: str) -> list[str]:
    """The keyword hyperparameters of a registered model (its constructor minus `schema`)."""
    cls = model_class(name)
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "schema")]


def model_class(name: str) -> type[Any]:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; registered: {sorted(MODELS)}") from None


def build_model(name: str, schema: DatasetSchema | Mapping[str, Any], hparams: Mapping[str, Any]) -> Any:
    """Model `name` for `schema` (a DatasetSchema or a processed meta.json dict) built with the constructor
    keywords `hparams` (`{}`: the constructor's defaults). A keyword the model does not take is an error."""
    cls = model_class(name)
    schema = as_schema(schema)
    unknown = sorted(set(hparams) - set(hyperparameters(name)))
    if unknown:
        raise ValueError(f"model {name!r} has no hyperparameter(s) {unknown}; it takes {sorted(hyperparameters(name))}")
    return cls(schema=schema, **hparams)
