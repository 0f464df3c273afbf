"""The model zoo: every model of the MultiTab study behind one interface (see base.py for the
contract: constructor ``Model(*, schema, **hyperparameters)``, ``forward(x_num, x_cat) -> {task:
Tensor}``, the optional ``training_loss`` / ``fit_context`` hooks, and ``fit`` / ``predict`` for
non-torch models).

``build_model(name, schema, hparams)`` builds a registered model with the constructor keywords `hparams`,
every one of them (no constructor default is used: the pipeline's come from one hyperparameter file per run,
multitab.hparams, checked complete when the run matrix is expanded; in a notebook,
``multitab.hparams.load(dataset, name).model`` gives the authors' selection under the default protocol).
The registry is multitab.registry.REGISTRY: multitab_net, stl_mlp, mtl_shared_bottom, mmoe, ple, stem,
tab_transformer, ft_transformer, saint, maya, xgboost.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.registry import MODEL_CLASSES, REGISTRY


def _import(path: str) -> type[Any]:
    module, _, name = path.partition(":")
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


# Keywords a model that trains itself (not a torch module: XGBoost) takes from the run's settings (its seed, early
# stopping, device, threads: multitab.training.run.build_run_model passes them), not from its hyperparameters.
RUN_KEYWORDS = ("seed", "early_stopping_rounds", "device", "n_threads")

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


def file_keywords(name: str) -> list[str]:
    """The keywords a hyperparameter file of a registered model gives: its hyperparameters but those the pipeline
    supplies (`schema` from the processed data: features, cardinalities, tasks; RUN_KEYWORDS for a model that
    trains itself)."""
    import torch

    run = () if issubclass(model_class(name), torch.nn.Module) else RUN_KEYWORDS
    return [k for k in hyperparameters(name) if k not in run]


def model_class(name: str) -> type[Any]:
    """The class of a registered model: `MODELS`'s, or the registry entry's (one added since this module was
    imported)."""
    if name in MODELS:
        return MODELS[name]
    if name in REGISTRY:
        return _import(REGISTRY[name].cls)
    raise KeyError(f"unknown model {name!r}; registered: {sorted({*MODELS, *REGISTRY})}")


def build_model(name: str, schema: DatasetSchema | Mapping[str, Any], hparams: Mapping[str, Any]) -> Any:
    """Model `name` for `schema` (a DatasetSchema or a processed meta.json dict) built with the constructor
    keywords `hparams`: every one a hyperparameter file gives (file_keywords; a missing one is an error, not the
    constructor's default: what trains is what the run's file says), and none the model does not take. The run's
    settings of a model that trains itself (RUN_KEYWORDS) may be left out where it is not trained (the complexity
    table); the training passes them (multitab.training.run.build_run_model)."""
    cls = model_class(name)
    schema = as_schema(schema)
    takes = hyperparameters(name)
    unknown = sorted(set(hparams) - set(takes))
    if unknown:
        raise ValueError(f"model {name!r} has no hyperparameter(s) {unknown}; it takes {sorted(takes)}")
    missing = [k for k in file_keywords(name) if k not in hparams]
    if missing:
        raise ValueError(f"model {name!r}: hyperparameter(s) {missing} not given (no constructor default is used: "
                         "give every keyword of its constructor)")
    return cls(schema=schema, **hparams)
