"""The registries' names, readable by the config package, which sits below the packages that define them
(params.yaml is checked against them before any stage runs).

The model registry: each model's name and the class it builds, written as `module:Class` so that the
names can be read without importing torch. multitab.models imports the classes (`MODELS`). Adding a model:
its class, one line here, and its hyperparameter files (docs/extending.md).

The dataset registry: the names of the datasets with a schema (multitab.datasets.schema.SCHEMAS, in its
order)."""

from __future__ import annotations

MODEL_CLASSES: dict[str, str] = {
    "multitab_net": "multitab.models.multitab_net:MultiTabNet",
    "tab_transformer": "multitab.models.tab_transformer:TabTransformer",
    "ft_transformer": "multitab.models.ft_transformer:FTTransformer",
    "saint": "multitab.models.saint:SAINT",
    "stl_mlp": "multitab.models.stl_mlp:STLMLP",
    "mtl_shared_bottom": "multitab.models.mtl_shared_bottom:MTLSharedBottom",
    "mmoe": "multitab.models.mmoe:MMoE",
    "ple": "multitab.models.ple:PLE",
    "stem": "multitab.models.stem:STEM",
    "maya": "multitab.models.maya:MAYA",
    "xgboost": "multitab.models.xgboost_model:XGBoost",
}
MODEL_NAMES: tuple[str, ...] = tuple(MODEL_CLASSES)

DATASET_NAMES: tuple[str, ...] = ("aliexpress", "acs_income", "higgs")
