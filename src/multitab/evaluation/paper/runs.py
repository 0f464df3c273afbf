"""Reading the training runs: results/runs/<dataset>/<model>/seed<S>/metrics.json.

A run's model is a registry name (`multitab_net`) or a variant of one, `<model>@<variant>`
(`multitab_net@single_none`): the ablation runs of Table 2 are named that way (see params.yaml
`aggregate.ablation`). The folder name, the file's `model` and its `seed` must agree.

Metric values are fractions (AUC, explained variance); a task value that is null or NaN (an undefined AUC)
is kept as NaN and makes every aggregate that needs it "missing". A run that has no metrics.json (a failed
or skipped stage) is simply absent: `RunSet.matrix` then reports it as missing, never as a number.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

log = logging.getLogger(__name__)

TaskType = Literal["binary", "multiclass", "regression"]
MODEL_NAME = re.compile(r"^[a-z][a-z0-9_]*(@[A-Za-z0-9_.\-]+)?$")
SEED_DIR = re.compile(r"^seed(\d+)$")
REQUIRED = ("dataset", "model", "seed", "standin", "task_types", "test", "val")


class RunError(ValueError):
    """A metrics.json that does not follow the contract; the message names the file and the field."""


@dataclass(frozen=True)
class Run:
    dataset: str
    model: str  # registry name or `<model>@<variant>`
    seed: int
    standin: bool
    task_types: dict[str, TaskType]
    test: dict[str, float]
    val: dict[str, float]
    test_mse: dict[str, float] = field(default_factory=dict)
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def split_model(name: str) -> tuple[str, str | None]:
    """`multitab_net@single_none` -> ("multitab_net", "single_none"); `mmoe` -> ("mmoe", None)."""
    if not MODEL_NAME.match(name):
        raise ValueError(
            f"model name {name!r} is not `<model>` or `<model>@<variant>` (lower-case registry name, "
            "variant of letters, digits, '_', '-', '.')"
        )
    base, _, variant = name.partition("@")
    return base, (variant or None)


def _metric_map(value: Any, where: str, key: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise RunError(f"{where}: `{key}` must map task -> number, got {type(value).__name__}")
    out = {}
    for task, v in value.items():
        if v is None:
            out[str(task)] = math.nan
        elif isinstance(v, bool) or not isinstance(v, int | float):
            raise RunError(f"{where}: `{key}.{task}` must be a number or null, got {v!r}")
        else:
            out[str(task)] = float(v)
    return out


def parse_run(data: Any, where: str) -> Run:
    """Validate one metrics.json mapping; errors name `where` (the file) and the field."""
    if not isinstance(data, dict):
        raise RunError(f"{where}: expected a JSON object, got {type(data).__name__}")
    absent = [k for k in REQUIRED if k not in data]
    if absent:
        raise RunError(f"{where}: missing field(s) {absent}; a training run writes {list(REQUIRED)}")
    task_types = data["task_types"]
    if not isinstance(task_types, dict) or not task_types:
        raise RunError(f"{where}: `task_types` must be a non-empty mapping task -> type")
    for task, tt in task_types.items():
        if tt not in ("binary", "multiclass", "regression"):
            raise RunError(f"{where}: task_types.{task}={tt!r} is not binary, multiclass or regression")
    test = _metric_map(data["test"], where, "test")
    val = _metric_map(data["val"], where, "val")
    if set(test) != set(task_types):
        raise RunError(f"{where}: `test` tasks {sorted(test)} differ from task_types {sorted(task_types)}")
    test_mse = _metric_map(data.get("test_mse") or {}, where, "test_mse")
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise RunError(f"{where}: `seed` must be an integer, got {seed!r}")
    if not isinstance(data["standin"], bool):
        raise RunError(f"{where}: `standin` must be true or false, got {data['standin']!r}")
    model = str(data["model"])
    try:
        split_model(model)
    except ValueError as e:
        raise RunError(f"{where}: {e}") from None
    extra = {k: v for k, v in data.items() if k not in (*REQUIRED, "test_mse")}
    return Run(
        dataset=str(data["dataset"]), model=model, seed=seed, standin=data["standin"],
        task_types=dict(task_types), test=test, val=val, test_mse=test_mse, path=where, extra=extra,
    )


def load_runs(runs_dir: str | Path) -> list[Run]:
    """Every results/runs/<dataset>/<model>/seed<S>/metrics.json under `runs_dir` (none if it is absent).

    The path must agree with the file's dataset, model and seed: a copied or misplaced file is an error."""
    runs_dir = Path(runs_dir)
    if not runs_dir.exists():
        log.warning("%s does not exist: every run is missing", runs_dir)
        return []
    runs = []
    for path in sorted(runs_dir.glob("*/*/seed*/metrics.json")):
        seed_dir, model_dir, dataset_dir = path.parent, path.parent.parent, path.parent.parent.parent
        m = SEED_DIR.match(seed_dir.name)
        if m is None:
            raise RunError(f"{path}: folder {seed_dir.name!r} is not seed<integer>")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise RunError(f"{path}: not valid JSON ({e}); delete it and re-run its train stage") from None
        run = parse_run(data, str(path))
        expected = (dataset_dir.name, model_dir.name, int(m.group(1)))
        if (run.dataset, run.model, run.seed) != expected:
            raise RunError(
                f"{path}: the file says dataset={run.dataset!r}, model={run.model!r}, seed={run.seed} but "
                f"its folder says {expected}; re-run the stage that writes this folder"
            )
        runs.append(run)
    return runs


def _differences(recorded: Any, expected: Any, where: str = "") -> list[str]:
    """`key: recorded -> expected` for every leaf where two plain-JSON values differ."""
    if isinstance(recorded, dict) and isinstance(expected, dict):
        out = []
        for key in sorted(set(recorded) | set(expected)):
            path = f"{where}.{key}" if where else str(key)
            if key not in recorded or key not in expected:
                out.append(f"{path}: {recorded.get(key, '(absent)')!r} -> {expected.get(key, '(absent)')!r}")
            else:
                out += _differences(recorded[key], expected[key], path)
        return out
    return [] if recorded == expected else [f"{where or 'value'}: {recorded!r} -> {expected!r}"]


def select_declared(runs: Iterable[Run], params: Any) -> list[Run]:
    """The runs of the run matrix the current params declare (multitab.runs.expand.declared_runs), each
    checked against what those params say about it (`run_params`, which metrics.json records as `params`).

    A run folder the matrix no longer holds (after a group's seeds shrank, a model left its models ...)
    stays on disk, as DVC leaves it, but enters no table: it is listed in a warning. A declared run trained
    under other settings (its stage not re-run since params.yaml changed, or a metrics.json from before
    runs recorded them) is refused: RunError naming its path and the settings that differ."""
    from multitab.runs.expand import declared_runs
    from multitab.runs.profiles import run_params

    declared = declared_runs(params)
    kept, undeclared = [], []
    for run in runs:
        group = declared.get((run.dataset, run.model, run.seed))
        if group is None:
            undeclared.append(run.path)
            continue
        expected = run_params(params, group, run.dataset, run.model)
        recorded = run.extra.get("params")
        if recorded is None:
            raise RunError(f"{run.path}: records no `params` (written before runs recorded their settings), so "
                           "whether it matches params.yaml is unknown; re-run its train stage (`make repro`)")
        diff = _differences(recorded, expected)
        if diff:
            shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
            raise RunError(f"{run.path}: trained under other settings than {params.source} declares now "
                           f"(recorded -> now: {shown}); re-run its train stage (`make repro`) or restore "
                           "the params it was trained with")
        kept.append(run)
    if undeclared:
        log.warning("%d run(s) on disk are not in the run matrix %s declares (its `runs` groups) "
                    "and enter no table: %s", len(undeclared), params.source,
                    ", ".join(undeclared[:5]) + (" ..." if len(undeclared) > 5 else ""))
    return kept


class RunSet:
    """Runs indexed by (dataset, model, seed), with the expected seeds per dataset.

    `seeds`: the seeds every model must have; None = every seed found for the dataset (across models)."""

    def __init__(self, runs: Iterable[Run], seeds: Sequence[int] | None = None) -> None:
        self._runs: dict[tuple[str, str], dict[int, Run]] = {}
        for run in runs:
            slot = self._runs.setdefault((run.dataset, run.model), {})
            if run.seed in slot:
                raise RunError(f"{run.path}: duplicate run of {run.dataset}/{run.model}/seed{run.seed}")
            slot[run.seed] = run
        self._seeds = tuple(seeds) if seeds is not None else None
        self._check_tasks()

    def _check_tasks(self) -> None:
        by_dataset: dict[str, Run] = {}
        for slot in self._runs.values():
            for run in slot.values():
                first = by_dataset.setdefault(run.dataset, run)
                if run.task_types != first.task_types:
                    raise RunError(
                        f"{run.path}: task_types {run.task_types} differ from {first.path}'s "
                        f"{first.task_types}; runs of one dataset must share its tasks"
                    )

    @property
    def datasets(self) -> list[str]:
        return sorted({d for d, _ in self._runs})

    def models(self, dataset: str) -> list[str]:
        return sorted(m for d, m in self._runs if d == dataset)

    def seeds(self, dataset: str) -> tuple[int, ...]:
        if self._seeds is not None:
            return self._seeds
        found = {s for (d, _), slot in self._runs.items() if d == dataset for s in slot}
        return tuple(sorted(found))

    def runs(self, dataset: str, model: str) -> dict[int, Run]:
        return dict(self._runs.get((dataset, model), {}))

    def task_types(self, dataset: str) -> dict[str, TaskType]:
        for (d, _), slot in self._runs.items():
            if d == dataset and slot:
                return dict(next(iter(slot.values())).task_types)
        return {}

    def standin(self, dataset: str) -> bool | None:
        """True if any run of the dataset used stand-in data; None when the dataset has no run."""
        flags = [r.standin for (d, _), slot in self._runs.items() if d == dataset for r in slot.values()]
        return any(flags) if flags else None

    def training_caps(self) -> dict[str, list[int]]:
        """Distinct training caps recorded by the runs (`max_train_rows`, `max_epochs`), for the report's
        warning that a run set was trained at reduced scale; empty when no run capped its training rows."""
        runs = [r for slot in self._runs.values() for r in slot.values()]
        rows = sorted({int(r.extra["max_train_rows"]) for r in runs if r.extra.get("max_train_rows") is not None})
        if not rows:
            return {}
        epochs = sorted({int(r.extra["max_epochs"]) for r in runs if r.extra.get("max_epochs") is not None})
        return {"max_train_rows": rows, "max_epochs": epochs}

    def n_found(self, dataset: str, model: str) -> int:
        return len(set(self.runs(dataset, model)) & set(self.seeds(dataset)))

    def matrix(self, dataset: str, model: str, key: Literal["test", "val", "test_mse"] = "test") -> pd.DataFrame | None:
        """Seeds x tasks of metric `key` for the expected seeds, or None when any expected run is missing or
        any of its values is undefined (NaN): a partial set is never averaged."""
        seeds = self.seeds(dataset)
        slot = self.runs(dataset, model)
        if not seeds or any(s not in slot for s in seeds):
            return None
        tasks = list(self.task_types(dataset))
        if key == "test_mse":
            tasks = [t for t, tt in self.task_types(dataset).items() if tt == "regression"]
        rows = {}
        for s in seeds:
            values = getattr(slot[s], key)
            if any(t not in values for t in tasks):
                return None
            rows[s] = [values[t] for t in tasks]
        frame = pd.DataFrame.from_dict(rows, orient="index", columns=tasks)
        if frame.isna().any().any():
            return None
        return frame
