"""Run profiles: the same stages with another section of params.yaml laid over their settings.

- `bench`: the default MultiTab-Bench runs (`train_bench@...`). `bench.train` replaces keys of `train`
  (e.g. all training rows and more epochs, so the default report shows models that learned).
- `study`: the Figure 5 + 6 study (`make study`: `synthesize_study@...`, `train_study@...`,
  `aggregate_study`). `study.data` replaces keys of `bench.data` (the study's sample count) and
  `study.train` replaces keys of `train` (the paper's protocol: every row, early stopping).
- `sweep`: the grid points of a hyperparameter sweep (`make sweep`: `sweep_<family>@...`). `sweep.train`
  replaces keys of `train` (e.g. the epochs a grid point trains).

`profiled(params, profile)` is a function of the typed root config (multitab.config): the overlays were
checked against their target's fields when params.yaml was loaded, and the replaced sections check their
values again (e.g. `train.max_epochs >= 1`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from multitab.config import ConfigError, Params

PROFILES = ("default", "bench", "study", "sweep")


def profiled(params: Params, profile: str) -> Params:
    """`params` with the profile's sections laid over the sections they replace (key by key; an absent
    overlay changes nothing)."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; known: {list(PROFILES)}")
    if profile == "default":
        return params
    source = f"{params.source} (profile {profile})"
    try:
        if profile == "bench":
            return params.replace(train=dataclasses.replace(params.train, **params.bench.train))
        if profile == "sweep":
            return params.replace(train=dataclasses.replace(params.train, **params.sweep.train))
        study = params.study
        return params.replace(
            bench=dataclasses.replace(params.bench, data=dataclasses.replace(params.bench.data, **study.data)),
            train=dataclasses.replace(params.train, **study.train),
        )
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


# Settings of `train` that change a run's numbers (device, threads and the progress bar change at most the
# last bits or nothing; the seed is part of the run's identity).
_RUN_TRAIN_KEYS = ("batch_size", "max_epochs", "max_train_rows", "precision", "deterministic", "compile",
                   "hparams", "xgboost_early_stopping_rounds")


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and mappings as JSON's plain values (what metrics.json holds after a round trip)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def run_params(params: Params, profile: str, dataset: str, model: str) -> dict[str, Any]:
    """What params.yaml says about run (`dataset`, `model`) under `profile`, resolved: the train settings
    that change its numbers, its patience, optimiser override, build_model overrides (variant included),
    the protocol, and the data's settings (`datasets.<dataset>`, or `bench.data` and `bench.configs.<c>` for
    a MultiTab-Bench configuration). metrics.json records it as `params`; the aggregate stage refuses a run
    whose record differs from what the current params.yaml resolves to (trained under other settings)."""
    p = profiled(params, profile)
    t = p.train
    base, _ = t.resolve(model)
    data: Any = None  # a processed folder given directly: no data settings in params
    if "datasets" in p.sections and dataset in p.datasets:
        data = p.datasets[dataset]
    elif "bench" in p.sections and dataset in p.bench.configs:
        data = {"bench": p.bench.data, "config": p.bench.configs[dataset]}
    return _plain({
        "profile": profile,
        "protocol": p.protocol,
        "train": {k: getattr(t, k) for k in _RUN_TRAIN_KEYS},
        "patience": t.patience_for(dataset),
        "optim": t.optim.get(base),
        "overrides": t.overrides_for(model, dataset),
        "data": data,
    })


def declared_runs(params: Params) -> dict[tuple[str, str, int], str]:
    """(dataset, run model, seed) -> profile of every run the training stages of dvc.yaml declare under
    these params: `train@D-M-S` (train.datasets x train.models x train.seeds), `train_ablation@D-V-S`
    (multitab_net@<variant> for train.variants) and `train_bench@C-M-S` (bench.configs x bench.train's
    models x train.seeds; profile bench)."""
    t = params.train
    out: dict[tuple[str, str, int], str] = {}
    for dataset in t.datasets:
        for seed in t.seeds:
            for model in t.models:
                out[(dataset, model, seed)] = "default"
            for name in t.variants:
                out[(dataset, f"multitab_net@{name}", seed)] = "default"  # as dvc.yaml names them
    if "bench" in params.sections:
        bench = profiled(params, "bench").train
        for config in params.bench.configs:
            for model in bench.models:
                for seed in t.seeds:
                    out[(config, model, seed)] = "bench"
    return out
