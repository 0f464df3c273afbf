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
