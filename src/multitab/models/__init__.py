"""The model zoo: every model of the MultiTab study behind one interface (see base.py for the
contract: constructor ``Model(*, schema, **hyperparameters)``, ``forward(x_num, x_cat) -> {task:
Tensor}``, the optional ``training_loss`` / ``fit_context`` hooks, and ``fit`` / ``predict`` for
non-torch models).

``build_model(name, schema, protocol="paper", **overrides)`` builds a registered model at the authors'
selected configuration for the schema's dataset (defaults.py), changed as the protocol says (there is no
default protocol: name the one you mean), with overrides applied on top.
Registry names: multitab_net, stl_mlp, mtl_shared_bottom, mmoe, ple, stem, tab_transformer,
ft_transformer, saint, maya, xgboost.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.models.base import MultitaskModel, PerTask
from multitab.models.defaults import model_defaults, training_defaults
from multitab.models.ft_transformer import FTTransformer
from multitab.models.maya import MAYA
from multitab.models.mmoe import MMoE
from multitab.models.mtl_shared_bottom import MTLSharedBottom
from multitab.models.multitab_net import MultiTabNet
from multitab.models.ple import PLE
from multitab.models.saint import SAINT
from multitab.models.stem import STEM
from multitab.models.stl_mlp import STLMLP
from multitab.models.tab_transformer import TabTransformer
from multitab.models.xgboost_model import XGBoost

# One explicit registry, name -> class. (The MLP family, MAYA and XGBoost are added by their own
# modules' authors: stl_mlp, mtl_shared_bottom, mmoe, ple, stem, maya, xgboost.)
MODELS: dict[str, type[Any]] = {
    "multitab_net": MultiTabNet,
    "tab_transformer": TabTransformer,
    "ft_transformer": FTTransformer,
    "saint": SAINT,
    "stl_mlp": STLMLP,
    "mtl_shared_bottom": MTLSharedBottom,
    "mmoe": MMoE,
    "ple": PLE,
    "stem": STEM,
    "maya": MAYA,
    "xgboost": XGBoost,
}


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


def build_model(
    name: str, schema: DatasetSchema | Mapping[str, Any], *, protocol: str,
    entry: dict[str, Any] | None | str = "authors", **overrides: Any
) -> Any:
    """Model `name` for `schema` at a selected configuration (`entry`, their format; by default the
    authors' selection for the dataset), changed as `protocol` says (multitab.protocol: "paper" |
    "authors_code"; no default, so that a notebook and the pipeline cannot build different models from
    the same call: the pipeline's is params.yaml's `protocol`), `overrides` applied on top."""
    cls = model_class(name)
    schema = as_schema(schema)
    allowed = set(hyperparameters(name))
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise ValueError(f"model {name!r} has no hyperparameter(s) {unknown}; it takes {sorted(allowed)}")
    config = {**model_defaults(schema.name, name, protocol, entry), **overrides}
    return cls(schema=schema, **config)


__all__ = [
    "MODELS",
    "MultitaskModel",
    "PerTask",
    "as_schema",
    "build_model",
    "hyperparameters",
    "model_class",
    "model_defaults",
    "training_defaults",
]
