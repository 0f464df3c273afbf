"""A run's whole configuration, resolved once: what `python -m multitab.runs` writes into runs.yaml for each run (its
record, which the train stage reads and DVC tracks as the stage's params) and what `python -m multitab.runs show
<run>` prints with the source of every value.

A run reads one hyperparameter file (multitab.runs.locate.hparams_file chooses it); over it, the later winning:
  1. a sweep's grid point (`runs.<group>.grid`; multitab.hparams.POINT_KEYS);
  2. the protocol's overlay (hparams/protocol/<protocol>.yaml);
  3. params.yaml's `train`, each key replaced by the run group's (`runs.<group>.train`): `model_overrides` (per model,
     then per dataset), the variant's `overrides`, `optim.<model>`; for a run of attribution arm settings (the
     attribution group, the study under `protocol: authors_code`) the arm's optimiser, weight decay, epochs, mask
     and inter-sample layer instead (multitab.config.attribution.train_config);
  4. the training settings (TrainSettings): `train.*`, each replaced by `runs.<group>.train.*`; the epoch budget is
     `max_epochs` when set, else the file's `optim.max_epochs`; the patience `patience.<dataset>`, else `default`.

The record (besides the run's shape: data, folders, its file):
    hparams:      the file, its selection, the grid point, `model` (every constructor keyword), `optim`
    train:        multitab.runs.record.TrainSettings
    params:       what params.yaml says about the run, as metrics.json records it (multitab.runs.profiles.run_params;
                  the aggregate stage compares it with the params of its time)
    progress:     the progress bar (changes no number: DVC does not track it)
    attribution:  the arm settings of the run's key (a run of arm settings), else null
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, Params
from multitab.config.attribution import trains_arm
from multitab.config.train import TrainConfig
from multitab.hparams import HPARAMS, Hparams, protocol_overlay, read, resolve
from multitab.hparams.recipe import is_recipe, n_features, read_run_file
from multitab.registry import is_user_model
from multitab.runs.locate import data_names
from multitab.runs.profiles import plain, run_params, run_train
from multitab.runs.record import RunConfig, TrainSettings
from multitab.runs.types import Run

log = logging.getLogger(__name__)
# The record's keys that DVC tracks as the train stage's params (runs.yaml `train_runs.<key>.<this>`)
TRACKED = ("hparams", "train", "params")
TRAINS_ITSELF = "none: the model trains itself (no optimiser, no epochs)"


def train_settings(config: TrainConfig, hparams: Hparams, *, dataset: str,
                   where: Callable[[str], str] = lambda path: f"train.{path}", model: str | None = None,
                   sources: dict[str, str] | None = None, protocol_source: str = "protocol") -> TrainSettings:
    """The training settings of a run of `model` (a run model name: its variant's keywords are among the
    overrides) on `dataset` under `config`, its hyperparameters `hparams` resolved; `sources` (when given) gets
    `train.<field>` -> the params key `where(<TrainConfig path>)` names, or the file."""
    found = {} if sources is None else sources
    torch = hparams.optim is not None
    if not torch:
        max_epochs, found["train.max_epochs"] = None, TRAINS_ITSELF
    elif config.max_epochs is not None:
        max_epochs, found["train.max_epochs"] = config.max_epochs, where("max_epochs")
    else:
        max_epochs = int(hparams.optim["max_epochs"])  # type: ignore[index]
        found["train.max_epochs"] = (f"{found.get('optim.max_epochs', hparams.file)} (optim.max_epochs: "
                                     f"{where('max_epochs')} is null)")
    found["train.patience"] = where(f"patience.{dataset}" if dataset in config.patience else "patience.default")
    same = ("batch_size", "max_train_rows", "precision", "device", "compile", "cuda_graph", "deterministic",
            "num_threads", "early_stopping_smoothing", "eval_batch_size", "xgboost_early_stopping_rounds")
    found.update({f"train.{k}": where(k) for k in same})
    found["train.protocol"] = protocol_source
    overrides = config.overrides_for(model, dataset) if model is not None else {}
    return TrainSettings(max_epochs=max_epochs, patience=config.patience_for(dataset),
                         **{k: getattr(config, k) for k in same}, protocol=config.protocol,
                         overrides=plain(overrides))


def settings_for(config: TrainConfig, hparams: Hparams, *, model: str, dataset: str, progress: bool = False
                 ) -> RunConfig:
    """A RunConfig for code outside the pipeline (tests, benchmarks): `hparams` (already resolved, e.g. by
    multitab.hparams.for_run) and `config`'s training settings, resolved as for a run of the pipeline."""
    return RunConfig(hparams=hparams, train=train_settings(config, hparams, dataset=dataset, model=model),
                     progress=progress)


def param_source(params: Params, group: str, model: str, arm: Mapping[str, Any] | None) -> Callable[[str], str]:
    """`where` of run group `group`'s runs of `model`: a path of TrainConfig (`optim.mmoe.lr`) -> the params key
    its value comes from (`params.yaml: runs.bench.train.max_epochs` or `params.yaml: train.max_epochs`); the
    settings an attribution arm sets (`arm`: the run's key point) -> the arms'."""
    base = model.partition("@")[0]
    own = params.group(group).train
    by_arm = {"max_epochs", f"optim.{base}.optimizer", f"optim.{base}.weight_decay", f"model_overrides.{base}.mask",
              f"model_overrides.{base}.inter_sample"}
    shown = ", ".join(f"{k}={v}" for k, v in (arm or {}).items())

    def where(path: str) -> str:
        if arm is not None and path in by_arm:
            return f"{params.source}: attribution.arms (the run's arm settings: {shown})"
        key = f"runs.{group}.train.{path}" if path.split(".")[0] in own else f"train.{path}"
        return f"{params.source}: {key}"
    return where


class Files:
    """The hyperparameter files and the protocol's overlay of one project, each read once."""

    def __init__(self, root: Path, protocol: str, params: Params | None = None) -> None:
        self.root = root
        self.params = params  # declares the datasets whose runs' recipes are resolved for their files
        try:
            self.overlay = protocol_overlay(root, protocol)
        except (OSError, ValueError) as e:  # bad input: one line naming the file, no traceback
            raise ConfigError(str(e)) from None
        self._read: dict[str, Hparams] = {}

    def read(self, file: str, run: Any = None) -> Hparams:
        """`file` read (a recipe: resolved for `run`'s dataset; a user's model's: its declaration's)."""
        key = read_key(file, run)
        if key not in self._read:
            self._read[key] = (read_run_file(self.root, file, run.model, lambda: n_features(run.dataset, self.params))
                               if run is not None else read(self.root / file, file))
        return self._read[key]


def read_key(file: str, run: Any) -> str:
    """What a run's hyperparameters are read once per: its file; a recipe's per dataset; a user's model's per model
    (two models of one package with their hyperparameters inline in params.yaml name the package as their file)."""
    if run is not None and is_recipe(file):
        return f"{file}@{run.dataset}"
    if run is not None and is_user_model(run.model):
        return f"{file}#{run.model.partition('@')[0]}"
    return file


def resolve_run(params: Params, run: Any, files: Files, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """The record of `run` (a multitab.runs.types.Run or Stack: its group, dataset, model, point and file); `sources`
    (when given) gets each value's source: `model.<keyword>`, `optim.<key>`, `train.<field>` -> where from."""
    found = {} if sources is None else sources
    config, point = run_train(params, run.group, run.model, run.point)
    arm = run.point if trains_arm(params, run.group) else None
    where = param_source(params, run.group, run.model, arm)
    try:
        file = files.read(run.hparams_file, run)
    except FileNotFoundError as e:
        raise ConfigError(_missing(params, run, str(e))) from None
    except (OSError, ValueError) as e:
        raise ConfigError(str(e)) from None
    h = resolve(file, files.overlay, model=run.model, dataset=run.dataset, point=point, config=config,
                sources=found, where=where, point_where=f"{params.source}: runs.{run.group}.grid")
    train = train_settings(config, h, dataset=run.dataset, where=where, model=run.model, sources=found,
                           protocol_source=f"{params.source}: protocol")
    run_config = RunConfig(hparams=h, train=train, progress=config.progress)
    record = run_config.record()
    if is_recipe(run.hparams_file):  # said where a reader looks: runs show, metrics.json, the report
        record["hparams"]["source"] = f"recipe (no authors' file for {run.dataset}/{run.model.partition('@')[0]})"
    return {**record, "params": run_params(params, run.group, run.dataset, run.model),
            "progress": config.progress, "attribution": plain(arm)}


def swept_by(params: Params, dataset: str, model: str) -> list[str]:
    """The sweep groups that select for `dataset` and registry `model` (their sweep_select writes its swept file)."""
    kinds = data_names(params)
    return [name for name, g in params.runs.items() if g.sweep is not None
            and any(d == dataset for _, d in g.data_names(kinds)) and model in g.models]


def pending_left_out(params: Params, runs: dict[str, Run], active: Sequence[str]) -> dict[str, Run]:
    """`runs` but those that read a swept file not written yet which a sweep group of `active` is to write (its
    sweep_select stage): `make sweep` expands them before the selection exists, and the expansion after it (`make
    repro`) reads it. Any other run's missing file is refused when it is resolved."""
    root = Path(params.source).parent
    kept, waiting = {}, []
    for key, run in runs.items():
        file = run.hparams_file
        if file.startswith(f"{HPARAMS}/swept/") and not (root / file).exists() and \
                set(swept_by(params, run.dataset, run.model.partition("@")[0])) & set(active):
            waiting.append(file)
            continue
        kept[key] = run
    if waiting:
        log.warning("%d run(s) read a sweep's selection that the sweep groups in this expansion are to write (%s): "
                    "they are left out until then; expand again after the sweep (`make repro` does)", len(waiting),
                    ", ".join(sorted(set(waiting))))
    return kept


def _missing(params: Params, run: Any, error: str) -> str:
    """A run's file not found: for a swept file, who writes it."""
    if not run.hparams_file.startswith(f"{HPARAMS}/swept/"):
        return f"{error} (run {run.key} reads it)"
    base = run.model.partition("@")[0]
    by = swept_by(params, run.dataset, base)
    how = (f"the sweep group(s) {by} select it: run `make sweep` first (stage sweep_select writes it)" if by else
           f"no sweep group (runs.<group>.sweep) selects for {run.dataset} and {base}: declare one and run `make "
           "sweep`, or write the file, or train the group with `hparams: authors`")
    return (f"{run.hparams_file}: not found; run {run.key} trains with the sweep's selection (`hparams: swept`, "
            f"{params.source} runs.{run.group}.train or train): {how}")


def render_sources(record: Mapping[str, Any], sources: Mapping[str, str], key: str) -> str:
    """`python -m multitab.runs show`: every constructor keyword, optimiser value and training setting of run
    `key` with its source, one a line."""
    h, train = record["hparams"], record["train"]
    rows: list[tuple[str, Any]] = [(f"model.{k}", v) for k, v in h["model"].items()]
    rows += [(f"optim.{k}", v) for k, v in (h["optim"] or {}).items()]
    rows += [(f"train.{k}", v) for k, v in train.items() if k != "overrides"]
    width = max(len(name) for name, _ in rows)
    lines = [f"run {key}: {h['file']} ({h['source']}{', point ' + str(h['point']) if h['point'] else ''})"]
    if record.get("attribution"):
        lines.append(f"  arm settings: {record['attribution']}")
    lines += [f"  {name:<{width}} = {value!r:<24} {sources.get(name, '?')}" for name, value in rows]
    return "\n".join(lines)
