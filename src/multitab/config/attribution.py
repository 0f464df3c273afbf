"""The attribution study (params.yaml `attribution`, `make attribution`; docs/study.md, "Attribution"): the
paper's MultiTab-Bench claim checked arm by arm, from the authors' exact setup to this project's study, one
factor at a time.

Every arm sets seven factors (multitab.config.bench.ATTRIBUTION_FACTORS). Three shape the data, so they name
its folder, `data/attribution/<config>_<tr|ho>_<raw|std>_<s<seed>|fixed>` (written by the `synthesize`
stage with `--profile attribution`):

- evaluation: `training_rows` (validation and test are the training rows themselves, all `n_samples` of
  them, as the authors' loader does, docs/deviations.md O6) or `held_out` (the 70/15/15 split);
- data_seed: `per_run` (a new dataset per run seed, generated with that seed, as their `seed_everything`
  before the generator does) or `fixed` (the configuration's own seed for every run);
- targets: `raw` or `standard`.

The other four are a run's training settings, laid over its run group's `train` (`train_config`) and
written into its key as a point (`opt`, `ep`; `mask`, `mix` only for the models that have them):
optimizer (every model), mask and inter_sample (MultiTab-Net only), epochs. A run's key therefore names
exactly the settings it trains with, so a run that two arms share (a rival under a MultiTab-Net-only
factor) is one key, one `train@` stage, trained once: `arm_runs` lists which runs make up each arm.

Under `protocol: authors_code` the study (`make study`, params.yaml `study`) is the authors' experiment: its
runs take every factor from the first arm whose source is `authors_code` (A0_authors, `study_settings`), so
its data folders (`data/study/<config>_tr_raw_s<seed>`) and run keys are named as that arm's; under `paper` it
keeps its own settings (`study_settings` is None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from multitab.config import ConfigError, Params
from multitab.config.train import OptimOverride, TrainConfig

_EVALUATION = {"training_rows": "tr", "held_out": "ho"}
_TARGETS = {"raw": "raw", "standard": "std"}
_OPTIMIZERS: dict[str, tuple[Literal["adam", "adamw"], float, str]] = {
    "adamw_wd0": ("adamw", 0.0, "adamw0"), "adam_wd1e-5": ("adam", 1e-5, "adam1e5")}
_MIXING = {"per_sample_mixing": "psm", "rope_attention": "rope"}
MIXING_MODELS = ("multitab_net",)  # the models the `mask` and `inter_sample` factors change


def data_name(config: str, settings: Mapping[str, Any], seed: int) -> str:
    """The data folder name of `config` under an arm's `settings` for run seed `seed`."""
    which = f"s{seed}" if settings["data_seed"] == "per_run" else "fixed"
    return f"{config}_{_EVALUATION[settings['evaluation']]}_{_TARGETS[settings['targets']]}_{which}"


def data_entry(config: str, settings: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """One data folder of an arm: what the synthesize stage writes for it (an entry of runs.yaml's `synthetic_data`)."""
    per_run = settings["data_seed"] == "per_run"
    return {"name": data_name(config, settings, seed), "config": config, "evaluation": settings["evaluation"],
            "targets": settings["targets"], "data_seed": seed if per_run else -1}


def run_point(settings: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The training settings of `model`'s run under an arm's `settings`, as the key's point."""
    epochs = settings["epochs"]
    point: dict[str, Any] = {"opt": _OPTIMIZERS[settings["optimizer"]][2],
                             "ep": "authors" if epochs == "authors" else int(epochs)}
    if model.partition("@")[0] in MIXING_MODELS:
        point.update(mask=settings["mask"], mix=_MIXING[settings["inter_sample"]])
    return point


def train_config(config: TrainConfig, point: Mapping[str, Any], model: str) -> TrainConfig:
    """`config` (the run group's) with a run's attribution point laid over it: the optimiser and weight decay
    of `model` (its learning rate stays the selection's), the epoch budget (`authors`: the file's, 10), and
    for MultiTab-Net the mask and the inter-sample layer (build_model keywords, after the protocol's)."""
    base = model.partition("@")[0]
    optimizer, weight_decay = next((o, wd) for o, wd, code in _OPTIMIZERS.values() if code == point["opt"])
    optim = {**config.optim, base: OptimOverride(optimizer=optimizer, lr=getattr(config.optim.get(base), "lr", None),
                                                 weight_decay=weight_decay)}
    overrides = dict(config.model_overrides)
    if "mask" in point:
        mode = next(name for name, code in _MIXING.items() if code == point["mix"])
        overrides[base] = {**overrides.get(base, {}), "mask": point["mask"], "inter_sample": mode}
    max_epochs = None if point["ep"] == "authors" else int(point["ep"])
    return dataclasses.replace(config, optim=optim, model_overrides=overrides, max_epochs=max_epochs)


def is_attribution(params: Params, group: str) -> bool:
    return "attribution" in params.sections and params.attribution.group == group


def trains_arm(params: Params, group: str) -> bool:
    """Whether run group `group` trains arm settings (each run's key point, laid over the group's `train` by
    `train_config`, and recorded in its metrics.json): the attribution group, and the study's under
    `protocol: authors_code`."""
    return is_attribution(params, group) or (
        "study" in params.sections and params.study.group == group and study_settings(params) is not None)


def settings_runs(configs: Sequence[str], models: Sequence[str], seeds: Sequence[int], settings: Mapping[str, Any]
                  ) -> list[tuple[str, str, int, str, dict[str, Any]]]:
    """The runs of `configs` x `models` x `seeds` under an arm's `settings`, as (config, model, seed, data name,
    point), in that order."""
    return [(config, model, seed, data_name(config, settings, seed), run_point(settings, model))
            for config in configs for model in models for seed in seeds]


def arm_runs(params: Params) -> dict[str, list[tuple[str, str, int, str, dict[str, Any]]]]:
    """arm -> its runs as (config, model, seed, data name, point), in params.yaml's order (configs, models,
    seeds of the attribution group)."""
    attribution = params.attribution
    group = params.group(attribution.group)
    return {arm: settings_runs(attribution.configs, group.models, group.seeds, settings)
            for arm, settings in attribution.settings().items()}


def settings_data(configs: Sequence[str], seeds: Sequence[int], settings: Iterable[Mapping[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Every data folder that `configs` x `seeds` need under each of `settings`, each once, in that order."""
    seen: dict[str, dict[str, Any]] = {}
    for one in settings:
        for config in configs:
            for seed in seeds:
                entry = data_entry(config, one, seed)
                seen.setdefault(entry["name"], entry)
    return list(seen.values())


def data_entries(params: Params) -> list[dict[str, Any]]:
    """Every data folder the arms need, each once, in the arms' order."""
    group = params.group(params.attribution.group)
    return settings_data(params.attribution.configs, group.seeds, params.attribution.settings().values())


# ---------------------------------------------------------------- the study under `protocol: authors_code`
def study_settings(params: Params) -> dict[str, Any] | None:
    """The factors the study trains with: under `protocol: authors_code`, the authors' arm's (the first of
    `attribution.arms` whose source is authors_code: A0_authors), so that `make study` is their experiment end
    to end; None under `paper` (the study's own: held-out data of each configuration's seed, `bench.data.targets`,
    its run group's training under the protocol)."""
    if params.protocol != "authors_code":
        return None
    if "attribution" not in params.sections:
        raise ConfigError(f"{params.source}: protocol authors_code runs the study with the authors' arm of "
                          "`attribution.arms` (source authors_code), and there is no `attribution` section")
    try:
        return params.attribution.authors()[1]
    except ConfigError as e:
        raise ConfigError(f"{params.source}: {e}") from None


def study_runs(params: Params) -> list[tuple[str, str, int, str, dict[str, Any]]] | None:
    """The study's runs under `study_settings`, as `arm_runs` lists an arm's; None under `paper`."""
    settings = study_settings(params)
    if settings is None:
        return None
    group = params.group(params.study.group)
    return settings_runs(params.study.configs, group.models, group.seeds, settings)


def study_data(params: Params) -> list[dict[str, Any]]:
    """Every data folder the study's runs need under `study_settings` (none under `paper`: `study.configs`
    names them)."""
    settings = study_settings(params)
    if settings is None:
        return []
    return settings_data(params.study.configs, params.group(params.study.group).seeds, [settings])
