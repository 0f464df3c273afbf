"""`python -m multitab.runs`: runs.yaml written (multitab.runs), and what a run trains with, before it trains, and
what changed since runs.yaml was written.

    python -m multitab.runs [--groups G ...]              # runs.yaml (multitab.runs.document.write)
    python -m multitab.runs show bench-p06_pd3_t3-mmoe-0   # every constructor keyword, optimiser value and
                                                          # training setting, each with the file or params key
                                                          # it came from (multitab.runs.resolve)
    python -m multitab.runs diff                          # the runs whose values params.yaml and the files
                                                          # resolve to now differ from runs.yaml's: old -> new

`show` resolves from params.yaml and the hyperparameter files as `python -m multitab.runs` does (any group's run,
opt-in or not; a stacked run's member too) and says when runs.yaml holds other values for it. `diff` compares
runs.yaml with what they resolve to now for the opt-in groups it holds; after `python -m multitab.runs`, `dvc
params diff` shows the same against the last commit (runs.yaml is the train stages' params file).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from multitab.config import ConfigError, Params, default_source, load_params, read_yaml
from multitab.config.runs import SHOWN, RunGroup
from multitab.runs.document import check_current, document, read_runs_file, read_written, write
from multitab.runs.expand import expand, stacked
from multitab.runs.resolve import TRACKED, Files, render_sources, resolve_run
from multitab.runs.types import KEY, RUNS_FILE, STACKS
from multitab.runtime.exit_codes import BAD_INPUT


def show(params_path: str | Path, key: str, runs_path: str | Path) -> str:
    """The text `show` prints for run (or stack) `key`."""
    params = load_params(params_path)
    runs = expand(params)
    _, stacks = stacked(params, runs)
    run = runs.get(key) or stacks.get(key)
    if run is None:
        near = difflib.get_close_matches(key, [*runs, *stacks], n=3)
        raise ConfigError(f"{params.source} declares no run {key!r}" + (f"; did you mean {near}?" if near else ""))
    sources: dict[str, str] = {}
    record = resolve_run(params, run, Files(Path(params.source).parent, params.protocol, params), sources)
    text = render_sources(record, sources, key) + "\n" + group_sources(params_path, params, run.group)
    written = _written(Path(runs_path), key)
    if written is not None and any(written.get(k) != record[k] for k in TRACKED):
        text += f"\n{runs_path} holds other values for it: run `python -m multitab.runs` (`diff` shows them)"
    return text


def group_sources(params_path: str | Path, params: Params, group: str) -> str:
    """The run group's keys params.yaml may leave out (multitab.config.runs.SHOWN), each with its value and where it
    comes from: the params key, or the code line of its default."""
    written = (read_yaml(params_path).get("runs") or {}).get(group) or {}
    lines = []
    for f in dataclasses.fields(RunGroup):
        if f.metadata.get("optional") == SHOWN:
            source = (f"{params.source}: runs.{group}.{f.name}" if f.name in written
                      else default_source(RunGroup, f.name))
            lines.append(f"  group.{f.name} = {getattr(params.group(group), f.name)!r:<24} {source}")
    return "\n".join(lines)


def _written(path: Path, key: str) -> dict[str, Any] | None:
    current = read_runs_file(path) or {}
    return (current.get(KEY) or {}).get(key) or (current.get(STACKS) or {}).get(key)


def changes(old: Any, new: Any, where: str = "") -> Iterator[str]:
    """`path: old -> new` for every leaf where two plain values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in [*old, *(k for k in new if k not in old)]:
            path = f"{where}.{k}" if where else str(k)
            if k not in new:
                yield f"{path}: {old[k]!r} -> (absent)"
            elif k not in old:
                yield f"{path}: (absent) -> {new[k]!r}"
            else:
                yield from changes(old[k], new[k], path)
    elif old != new:
        yield f"{where}: {old!r} -> {new!r}"


def diff(params_path: str | Path, runs_path: str | Path) -> str:
    """The text `diff` prints: runs.yaml as written against what params.yaml and the files resolve to now."""
    params = load_params(params_path)
    path = Path(runs_path)
    groups = [g for g in read_written(path).get("opt_in_groups") or [] if g in params.runs]
    now = document(params, groups)
    current = read_written(path, now)  # every section there: a file cut short would call every run after it added
    lines = []
    for section in (KEY, STACKS):
        before, after = current.get(section) or {}, now[section]
        for key in [*before, *(k for k in after if k not in before)]:
            if key not in after:
                lines.append(f"{key}: removed")
            elif key not in before:
                lines.append(f"{key}: added")
            else:
                found = [c for k in TRACKED for c in changes(before[key].get(k), after[key][k], k)]
                lines += [f"{key}: {c}" for c in found]
    return "\n".join(lines) if lines else f"{path}: every run's values are what {params.source} resolves to now"


def written_groups(path: str | Path) -> list[str]:
    """The opt-in groups runs.yaml (`path`) holds (none when it is absent or unreadable)."""
    current = read_runs_file(Path(path))
    groups = current.get("opt_in_groups") if current is not None else None
    return [str(g) for g in groups] if isinstance(groups, list) else []


def main(argv: list[str]) -> int:
    if argv[:1] in (["show"], ["diff"]):
        return _show_or_diff(argv)
    p = argparse.ArgumentParser(prog="python -m multitab.runs", description="The run matrix expanded and resolved "
                                "into runs.yaml (multitab.runs); `show <run>` and `diff`: see below.")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--out", default=RUNS_FILE)
    p.add_argument("--groups", nargs="*", default=[], help="opt-in run groups to put in (e.g. study)")
    p.add_argument("--keep-groups", action="store_true",
                   help="put in the opt-in groups the file holds now (dvc.yaml's stage `runs`)")
    p.add_argument("--check", action="store_true", help="exit 3 when the file is stale instead of writing it")
    a = p.parse_args(argv)
    try:
        params = load_params(a.params)
        if a.check:
            check_current(params, a.out)
        else:
            if a.keep_groups and Path(a.out).is_file():  # an unreadable file would keep none without a word
                read_written(Path(a.out))
            kept = [g for g in written_groups(a.out) if g in params.runs] if a.keep_groups else []
            write(params, a.out, [*a.groups, *kept])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    return 0


def _show_or_diff(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"python -m multitab.runs {argv[0]}", description=__doc__.split("\n\n")[0])
    if argv[0] == "show":
        p.add_argument("run", help="a run's key (runs.yaml train_runs), or a stack's (train_stacks)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--runs", default=RUNS_FILE, help="runs.yaml as written")
    a = p.parse_args(argv[1:])
    try:
        print(show(a.params, a.run, a.runs) if argv[0] == "show" else diff(a.params, a.runs))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    return 0
