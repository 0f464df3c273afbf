"""What one run is trained with: a run group's `train` laid over params.yaml's `train`, and the study's
data overlay.

- `group_train(params, group)`: the TrainConfig of run group `runs.<group>` (its `train` keys replace
  `train`'s; the keys were checked against TrainConfig's fields when params.yaml was loaded, and the
  replaced section checks its values again, e.g. `train.max_epochs >= 1`).
- `profiled(params, "study")`: `study.data` laid over `bench.data` (the study's sample count), for the
  study's synthesize stages; `"attribution"`: `attribution.data` likewise; `"default"` is params unchanged.
- `run_params(params, group, dataset, model)`: what params.yaml says about one run, which its metrics.json
  records and the aggregate stage checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from multitab.config import ConfigError, Params
from multitab.config.attribution import train_config, trains_arm
from multitab.config.train import TrainConfig

PROFILES = ("default", "study", "attribution")


def profiled(params: Params, profile: str) -> Params:
    """`params` with the profile's data overlay (`study`: study.data over bench.data; `attribution`:
    attribution.data)."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; known: {list(PROFILES)}")
    if profile == "default":
        return params
    try:
        overlay = params.study.data if profile == "study" else params.attribution.data
        return params.replace(
            bench=dataclasses.replace(params.bench, data=dataclasses.replace(params.bench.data, **overlay)))
    except ConfigError as e:
        raise ConfigError(f"{params.source} (profile {profile}): {e}") from None


def group_train(params: Params, group: str) -> TrainConfig:
    """`train` with run group `group`'s `train` keys laid over it (key by key)."""
    try:
        return dataclasses.replace(params.train, **params.group(group).train)
    except ConfigError as e:
        raise ConfigError(f"{params.source}: runs.{group}.train: {e}") from None


def run_train(params: Params, group: str, model: str, point: dict[str, Any] | None
              ) -> tuple[TrainConfig, dict[str, Any] | None]:
    """(a run's TrainConfig, the grid point multitab.hparams.for_run lays over its file): the group's `train`
    over `train` and the sweep's point; the point of an attribution run (and of a study run under `protocol:
    authors_code`) is its arm's training settings instead, laid over the TrainConfig (multitab.config.attribution),
    with no grid point."""
    config = group_train(params, group)
    if point is not None and trains_arm(params, group):
        return train_config(config, point, model), None
    return config, point


# Settings of `train` that change a run's numbers (device, threads and the progress bar change at most the
# last bits or nothing; the seed is part of the run's identity).
_RUN_TRAIN_KEYS = ("batch_size", "max_epochs", "max_train_rows", "precision", "deterministic", "compile",
                   "hparams", "xgboost_early_stopping_rounds", "stack_seeds")


def _smoothing(t: TrainConfig) -> dict[str, Any]:
    """`train.early_stopping_smoothing` and `train.eval_batch_size` when set (they change the run's numbers:
    the stopping rule, the validation metrics' rounding); nothing when null, so the records of runs from
    before the options still match what params.yaml resolves to."""
    keys = ("early_stopping_smoothing", "eval_batch_size")
    return {k: getattr(t, k) for k in keys if getattr(t, k) is not None}


def plain(value: Any) -> Any:
    """Dataclasses, tuples and mappings as JSON's plain values (what metrics.json holds after a round trip)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def run_params(params: Params, group: str, dataset: str, model: str) -> dict[str, Any]:
    """What params.yaml says about run (`dataset`, `model`) of run group `group`, resolved: the train
    settings that change its numbers, its patience, optimiser override, build_model overrides (variant
    included), the protocol, and the data's settings (`datasets.<dataset>`, or `bench.data` and
    `bench.configs.<c>` for a MultiTab-Bench configuration). metrics.json records it as `params`; the
    aggregate stage refuses a run whose record differs from what the current params.yaml resolves to
    (trained under other settings)."""
    t = group_train(params, group)
    base, _ = t.resolve(model)
    kinds = params.group(group).data
    if kinds == "study" or (isinstance(kinds, dict) and "study" in kinds):
        params = profiled(params, "study")  # its data: study.data over bench.data
    elif kinds == "attribution":
        params = profiled(params, "attribution")
    data: Any = None  # a processed folder given directly: no data settings in params
    if "datasets" in params.sections and dataset in params.datasets:
        cfg = params.datasets[dataset]
        # a dataset of the registry has no declaration: its runs' params read as before declarations existed
        data = {k: v for k, v in plain(cfg).items() if cfg.declared or k not in ("tasks", "features")}
    elif "bench" in params.sections and dataset in params.bench.configs:
        data = {"bench": params.bench.data, "config": params.bench.configs[dataset]}
    return plain({
        "group": group,
        "protocol": params.protocol,
        "train": {k: getattr(t, k) for k in _RUN_TRAIN_KEYS} | _smoothing(t),
        "patience": t.patience_for(dataset),
        "optim": t.optim.get(base),
        "overrides": t.overrides_for(model, dataset),
        "data": data,
    })
