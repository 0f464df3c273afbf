"""The names params.yaml may refer to, importable without torch (the flow reads params before any stage
runs): the model registry's names (multitab.models.MODELS holds exactly these; a test checks it) and the
real datasets (multitab.datasets.schema.SCHEMAS)."""

from __future__ import annotations

MODEL_NAMES: tuple[str, ...] = (
    "multitab_net",
    "tab_transformer",
    "ft_transformer",
    "saint",
    "stl_mlp",
    "mtl_shared_bottom",
    "mmoe",
    "ple",
    "stem",
    "maya",
    "xgboost",
)
