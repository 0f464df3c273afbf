"""The DVC side of the orchestration, without Prefect: the stage graph, what is stale, the config.

Kept free of Prefect imports so that `python -m flows.pipeline` with nothing to do answers in about the
time of `dvc status` (importing Prefect alone takes seconds; starting its ephemeral server, tens).
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, load_params
from multitab.config.orchestration import OrchestrationConfig
from multitab.files.paths import local_path_not_regular, not_regular
from multitab.runs.document import write as write_runs
from multitab.runs.types import RUNS_FILE


def load_config(root: str | Path, params: str | Path = "params.yaml") -> OrchestrationConfig:
    """`orchestration:` of `params` (relative to the project `root` unless absolute)."""
    return load_params(Path(root) / params).orchestration


def sync_runs_file(root: str | Path, params: str | Path = "params.yaml", groups: Sequence[str] = ()) -> None:
    """Bring runs.yaml, the run matrix dvc.yaml's stages iterate, in line with the params' run groups and
    the opt-in `groups` asked for (multitab.runs), before DVC reads dvc.yaml. A project without `runs:`
    has no runs.yaml."""
    loaded = load_params(Path(root) / params)
    if "runs" in loaded.sections:
        write_runs(loaded, Path(root) / RUNS_FILE, groups)
    elif groups:
        raise ConfigError(f"{loaded.source}: --groups {list(groups)}: the params declare no run groups (`runs:`)")


def check_local_paths(root: str | Path, params: str | Path = "params.yaml") -> None:
    """ConfigError for a dataset's `local.path` that is, or holds, a named pipe, a socket or a device:
    dvc.yaml makes the path a dependency of acquire@D whatever the source, and DVC, hashing it to see
    whether the stage changed, would wait on a pipe forever."""
    loaded = load_params(Path(root) / params)
    for name, ds in (loaded.sections.get("datasets") or {}).items():
        if ds.local.path is None:
            continue
        given = Path(ds.local.path)
        odd = not_regular(given if given.is_absolute() else Path(root) / given)
        if odd is not None:
            entry = odd[0] if given.is_absolute() else given / odd[0].relative_to(Path(root) / given)
            raise ConfigError(
                f"{loaded.source}: {local_path_not_regular(f'datasets.{name}.local.path', given, entry, odd[1])}"
            )


@dataclass(frozen=True)
class StagePlan:
    """The stages to run in a topological order, each stage's upstream stages within the plan, and the
    stages DVC found changed (None: not asked)."""

    order: tuple[str, ...]
    upstream: dict[str, tuple[str, ...]]
    changed: frozenset[str] | None = None
    # a stage's checkpoint folder (dvc.yaml `meta: {checkpoints: PATH}`), copied to the DVC remote while it
    # runs when orchestration.sync_remote is on (flows/remote.py)
    checkpoints: dict[str, str] = field(default_factory=dict)
    # a stage's data: its dependencies that another stage or a .dvc file produces (paths relative to the
    # root); their size on disk is its first memory estimate (flows/memory.py)
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def descendants(self, stage: str) -> set[str]:
        below: dict[str, list[str]] = {s: [] for s in self.order}
        for s in self.order:
            for u in self.upstream[s]:
                below[u].append(s)
        found: set[str] = set()
        frontier = [stage]
        while frontier:
            for other in below[frontier.pop()]:
                if other not in found:
                    found.add(other)
                    frontier.append(other)
        return found

    def to_run(self) -> tuple[str, ...]:
        """Stages that may have work to do, in graph order: the changed ones and everything downstream of
        them (a downstream stage may change once its upstream has run). The others are up to date."""
        if self.changed is None:
            return self.order
        below: dict[str, list[str]] = {s: [] for s in self.order}
        for s in self.order:
            for u in self.upstream[s]:
                below[u].append(s)
        hit = set(self.changed)
        for s in self.order:  # topological: upstream first
            if s in hit:
                hit.update(below[s])
        return tuple(s for s in self.order if s in hit)


def read_stage_graph(root: str | Path, changed: bool = False) -> StagePlan:
    """DVC's pipeline graph (`dvc.repo.Repo.index.graph`): every dvc.yaml stage with its upstream stages;
    with `changed`, also which stages DVC would reproduce now (`Stage.changed()`, what `dvc repro` and
    `dvc status` ask), from the same open repository: one look at the project for the whole run.

    Stages from .dvc files (data sources) are left out: they have no command to run. A frozen stage
    keeps no upstream edges, as in `dvc repro`.
    """
    import networkx as nx
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with Repo(str(root)) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages producing its deps

        def name(stage: PipelineStage) -> str:
            # `stage.addressing` is relative to the current folder; `dvc repro` runs in the root.
            dvcfile = os.path.relpath(stage.path, repo.root_dir)
            return stage.name if dvcfile == "dvc.yaml" else f"{dvcfile}:{stage.name}"

        stages = [s for s in nx.topological_sort(graph) if isinstance(s, PipelineStage)]
        upstream = {
            name(s): ()
            if s.frozen
            else tuple(sorted(name(u) for u in graph.successors(s) if isinstance(u, PipelineStage)))
            for s in stages
        }
        order = [name(s) for s in reversed(stages)]
        checkpoints = {
            name(s): str(s.meta["checkpoints"])
            for s in stages
            if isinstance(s.meta, dict) and s.meta.get("checkpoints")
        }
        inputs = {name(s): _produced_deps(s, graph, repo.root_dir) for s in stages}
        stale: frozenset[str] | None = None
        if changed:
            stale = frozenset(name(s) for s in _changed_stages(repo, stages))
    return StagePlan(order=tuple(order), upstream=upstream, changed=stale, checkpoints=checkpoints,
                     inputs={s: i for s, i in inputs.items() if i})


def _produced_deps(stage: Any, graph: Any, root: str) -> tuple[str, ...]:
    """The stage's dependencies that a stage or .dvc file upstream of it produces (its data, not its code)."""
    produced = [str(o.fs_path) for u in graph.successors(stage) for o in u.outs]
    found = []
    for dep in stage.deps:
        path = str(dep.fs_path)
        if any(path == o or path.startswith(o + os.sep) or o.startswith(path + os.sep) for o in produced):
            found.append(os.path.relpath(path, root))
    return tuple(found)


def _changed_stages(repo: Any, stages: list[Any], tries: int = 20) -> list[Any]:
    """`Stage.changed()` of every stage under the repository lock (as `dvc status` takes it), waiting while
    another `dvc` process (a stage of a parallel run) holds it."""
    from dvc.lock import LockError

    for attempt in range(tries):
        try:
            with repo.lock:
                return [s for s in stages if s.changed()]
        except LockError:
            if attempt == tries - 1:
                raise
            time.sleep(min(0.5 * 2**attempt, 5.0))
    return []  # not reached


class UnknownTarget(ValueError):
    """A target matches no stage; the message names the closest stage names."""


def closest(target: str, names: Sequence[str], n: int = 5) -> list[str]:
    """Stage names (and foreach groups) closest to a mistyped `target`."""
    groups = sorted({s.split("@", 1)[0] for s in names})
    candidates = [*groups, *names]
    found = difflib.get_close_matches(target, candidates, n=n, cutoff=0.5)
    if not found and "@" in target:  # right group, wrong item: compare the items of that group
        group = target.split("@", 1)[0]
        found = difflib.get_close_matches(target, [s for s in names if s.startswith(group + "@")], n=n)
    return found


def select(plan: StagePlan, targets: Sequence[str] | None) -> StagePlan:
    """Restrict the plan to `targets` and everything they depend on (like `dvc repro <targets>`).

    A target is a stage name (`split@higgs`), a foreach/matrix group (`split`: every `split@...`), or a
    shell pattern (`train@real-higgs-*`). Without targets: every stage (the opt-in run groups are in
    dvc.yaml's DAG only when runs.yaml holds them: multitab.runs).
    """
    if not targets:
        return plan
    wanted: set[str] = set()
    for target in targets:
        matched = {
            s
            for s in plan.order
            if s == target or s.split("@", 1)[0] == target or fnmatch.fnmatchcase(s, target)
        }
        if not matched:
            near = closest(target, plan.order)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise UnknownTarget(
                f"target {target!r} matches no stage of dvc.yaml ({len(plan.order)} stages){hint} "
                "(`dvc stage list` lists them)"
            )
        wanted |= matched
    closure: set[str] = set()
    frontier = list(wanted)
    while frontier:
        stage = frontier.pop()
        if stage not in closure:
            closure.add(stage)
            frontier.extend(plan.upstream[stage])
    order = tuple(s for s in plan.order if s in closure)
    changed = None if plan.changed is None else plan.changed & closure
    return StagePlan(
        order=order,
        upstream={s: plan.upstream[s] for s in order},
        changed=changed,
        checkpoints={s: c for s, c in plan.checkpoints.items() if s in closure},
        inputs={s: i for s, i in plan.inputs.items() if s in closure},
    )
