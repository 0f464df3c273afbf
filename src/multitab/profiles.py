"""Run profiles: the same stages with another section of params.yaml laid over their settings.

- `bench`: the default MultiTab-Bench runs (`train_bench@...`). `bench.train` replaces keys of `train`
  (e.g. all training rows and more epochs, so the default report shows models that learned).
- `study`: the Figure 5 + 6 study (`make study`: `synthesize_study@...`, `train_study@...`,
  `aggregate_study`). `study.data` replaces keys of `bench.data` (the study's sample count) and
  `study.train` replaces keys of `train` (the paper's protocol: every row, early stopping).

The stages read the profiled params through `profiled(params, profile)`; the typed loaders then check them
as usual, so a misspelt key fails with its path.
"""

from __future__ import annotations

import copy
from typing import Any

from multitab.config import ConfigError

PROFILES = ("default", "bench", "study")
# profile -> ((section laid over, section replaced) ...)
_LAYERS: dict[str, tuple[tuple[str, str], ...]] = {
    "default": (),
    "bench": (("bench.train", "train"),),
    "study": (("study.data", "bench.data"), ("study.train", "train")),
}


def _get(params: dict[str, Any], dotted: str, source: str) -> dict[str, Any] | None:
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if node is None:
        return None
    if not isinstance(node, dict):
        raise ConfigError(f"{source}:{dotted}: expected a mapping, got {node!r}")
    return node


def profiled(params: dict[str, Any], profile: str, source: str = "params.yaml") -> dict[str, Any]:
    """A copy of `params` with the profile's sections laid over the sections they replace (key by key;
    an absent overlay changes nothing)."""
    if profile not in _LAYERS:
        raise ConfigError(f"unknown profile {profile!r}; known: {list(PROFILES)}")
    out = copy.deepcopy(params)
    for overlay, target in _LAYERS[profile]:
        extra = _get(params, overlay, source)
        if not extra:
            continue
        base = _get(out, target, source)
        if base is None:
            raise ConfigError(f"{source}: profile {profile!r} lays {overlay} over {target}, which is missing")
        base.update(copy.deepcopy(extra))
    return out


def study_settings(params: dict[str, Any], source: str = "params.yaml") -> dict[str, Any]:
    """`study:` (configs, models, seeds, data, train, claim) checked against bench.configs."""
    study = _get(params, "study", source)
    if study is None:
        raise ConfigError(f"{source}: no `study:` section (the study profile of `make study`)")
    configs = (params.get("bench") or {}).get("configs") or {}
    for key in ("configs", "models", "seeds"):
        if not isinstance(study.get(key), list) or not study[key]:
            raise ConfigError(f"{source}:study.{key}: expected a non-empty list, got {study.get(key)!r}")
    unknown = [c for c in study["configs"] if c not in configs]
    if unknown:
        raise ConfigError(f"{source}:study.configs: {unknown} are not keys of bench.configs ({sorted(configs)})")
    return study
