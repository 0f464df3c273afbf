"""The model zoo: every model of the MultiTab study behind one interface (see base.py for the
contract: constructor ``Model(*, schema, **hyperparameters)``, ``forward(x_num, x_cat) -> {task:
Tensor}``, the optional ``training_loss`` / ``fit_context`` hooks, and ``fit`` / ``predict`` for
non-torch models).

``build_model(name, schema, hparams)`` builds a registered model with the constructor keywords `hparams`,
every one of them (no constructor default is used: the pipeline's come from one hyperparameter file per run,
multitab.hparams, checked complete when the run matrix is expanded; in a notebook,
``multitab.hparams.load(dataset, name).model`` gives the authors' selection under the default protocol).
The registry is multitab.registry.REGISTRY: multitab_net, stl_mlp, mtl_shared_bottom, mmoe, ple, stem,
tab_transformer, ft_transformer, saint, maya, xgboost; and the user's models params.yaml declares (`models:`,
multitab.config.models). Wherever a name is asked for, an import path `package.module:Class` names a class of the
user's own package too (`model_class("own_model.nets:TwoExpertMMoE")`): importing it runs that package's code.
`python -m multitab.models check package.module:Class` checks a class against the contract (multitab.models.contract).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.registry import MODEL_CLASSES, REGISTRY


class ModelImportError(ImportError):
    """A model's class cannot be imported; the message names the import path and what to do."""


def _import(path: str) -> type[Any]:
    module, _, name = path.partition(":")
    cls: type[Any] = getattr(importlib.import_module(module), name)
    return cls


def import_class(path: str) -> type[Any]:
    """The class an import path `package.module:Class` names, imported (its package's code runs); ModelImportError
    naming the path when the module is not on the Python path, fails to import, or has no such class."""
    module, colon, name = path.partition(":")
    if not colon or not module or not name:
        raise ModelImportError(f"{path!r}: not an import path `package.module:Class`")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module + ".").startswith(e.name + "."):  # the module or a parent
            raise ModelImportError(f"{path}: module {e.name!r} not found on the Python path; put the folder that "
                                   "holds its package on PYTHONPATH (or pip install it)") from None
        raise ModelImportError(f"{path}: importing {module} failed: {type(e).__name__}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the user's code failed while importing: say where, no traceback
        raise ModelImportError(f"{path}: importing {module} failed: {type(e).__name__}: {e}") from None
    cls = getattr(found, name, None)
    if not isinstance(cls, type):
        what = "has no" if cls is None else f"holds a {type(cls).__name__}, not a"
        raise ModelImportError(f"{path}: module {module} ({getattr(found, '__file__', '?')}) {what} class {name!r}")
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
    imported: a user's model, imported on first use); of an import path `package.module:Class`, that class."""
    if name in MODELS:
        return MODELS[name]
    if name in REGISTRY:
        return import_class(REGISTRY[name].cls)
    if ":" in name:
        return import_class(name)
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
