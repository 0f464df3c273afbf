"""An attribution record that reuses another record's runs (`python -m multitab.evaluation.bench.attribution
record ... --reuse FOLDER`): the configurations the new report has no run of are taken, for the new report's
arms, from an earlier committed record, rows as they are (their `run`, train_seconds and n_train), so that runs
already trained are not trained again. The header names what came from where, with the earlier record's own
commit and machine: such a record holds runs of two commits, and says so.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from multitab.evaluation.bench.numbers import StudyError, read_arms_csv, read_metrics_csv


def reused_rows(metrics: pd.DataFrame, curves: pd.DataFrame, arms: list[str], folder: Path
                ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(metrics, curves) with the rows of record `folder` for `arms` and the configurations `metrics` has no row
    of, appended; and those configurations, in the earlier record's order. StudyError when the earlier record
    has none, or lacks an arm for one of them."""
    other = read_metrics_csv(folder / "metrics.csv")
    if "arm" not in other.columns or not (folder / "curves.csv").is_file():
        raise StudyError(f"{folder}: not an attribution record (metrics.csv with an `arm` column, curves.csv)")
    other_curves = pd.read_csv(folder / "curves.csv", dtype={"config": str, "model": str})
    have = set(metrics["config"])
    configs = [c for c in dict.fromkeys(other["config"]) if c not in have]
    taken = other[other["arm"].isin(arms) & other["config"].isin(configs)]
    for config in configs:
        lacking = [arm for arm in arms if taken[(taken.config == config) & (taken.arm == arm)].empty]
        if lacking:
            raise StudyError(f"{folder}: configuration {config} has no run of arm(s) {lacking}; a reused "
                             "configuration needs every arm of the new report")
    if not configs:
        raise StudyError(f"{folder}: every configuration it holds is in the new report already; nothing to reuse")
    curves_taken = other_curves[other_curves["arm"].isin(arms) & other_curves["config"].isin(configs)]
    return (pd.concat([metrics, taken[metrics.columns]], ignore_index=True),
            pd.concat([curves, curves_taken[curves.columns]], ignore_index=True), configs)


REUSED = "- Reused, not retrained: "


def _header_lines(folder: Path) -> list[str]:
    header = folder / "header.md"
    return header.read_text().splitlines() if header.is_file() else []


def _reused_blocks(header: Path, lines: list[str]) -> list[tuple[list[str], list[str]]]:
    """A header's own reuse lines, each with the configurations it names and the lines nested under it."""
    blocks: list[tuple[list[str], list[str]]] = []
    for number, line in enumerate(lines, 1):
        if line.startswith(REUSED):
            found = re.search(r"configurations (\[[^\]]*\])", line)
            try:
                configs = ast.literal_eval(found.group(1)) if found else None  # literals only: nothing runs
            except (ValueError, SyntaxError):
                configs = None
            if not isinstance(configs, list):
                raise StudyError(f"{header}, line {number}: a reuse line without its list of configurations "
                                 "(`configurations ['...']`); restore the line as `record` wrote it")
            blocks.append(([str(c) for c in configs], [line]))
        elif line.startswith("  ") and blocks:
            blocks[-1][1].append(line)
    return blocks


def reuse_line(folder: Path, configs: list[str], arms: list[str]) -> str:
    """header.md's lines saying which configurations came from `folder`: those trained there, with that record's
    commit, machine and flow wall time, and, nested, those `folder` had itself reused (its own lines, indented),
    so that a chain of partial records still names the commit each configuration was trained at."""
    lines = _header_lines(folder)
    if not lines:
        origin = "no header.md"
    else:
        origin = next((line.removeprefix("- ").rstrip(".") for line in lines if line.startswith("- Commit:")),
                      "commit not stated")
        wall = next((line for line in lines if line.startswith("- Wall time of the whole")), None)
        if wall is not None:
            origin += "; flow wall time " + wall.rsplit(":", 1)[1].strip().rstrip(".")
    nested = [(sorted(set(block_configs) & set(configs), key=configs.index), block)
              for block_configs, block in _reused_blocks(folder / "header.md", lines)]
    nested = [(taken, block) for taken, block in nested if taken]
    there = [c for c in configs if not any(c in taken for taken, _ in nested)]
    head = f"{REUSED}configurations {configs} (arms {arms}) are the runs of {folder.as_posix()}"
    if not nested:
        return f"{head} ({origin}), rows copied as they are."
    again = [c for taken, _ in nested for c in taken]
    text = [f"{head}, rows copied as they are: {there} trained there ({origin}); {again} it had itself reused:"
            if there else f"{head}, rows copied as they are; it had itself reused them ({origin}):"]
    for _, block in nested:
        text += ["  " + line for line in block]
    return "\n".join(text)


def reused_record(source: Path, target: Path, folders: Sequence[Path], only: Sequence[str] | None = None
                  ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The report's metrics and curves (those of configurations `only`, when given: the ones trained since the
    record reused) with each of `folders`' runs of the configurations still lacking, in order (bench/reuse.py),
    and the header lines that say so; read before the record folder is written."""
    metrics, curves = read_metrics_csv(source / "metrics.csv"), pd.read_csv(source / "curves.csv")
    if only is not None:
        absent = [c for c in only if c not in set(metrics["config"])]
        if absent:
            raise StudyError(f"{source / 'metrics.csv'}: no run of configuration(s) {absent}; --configs names "
                             f"configurations of the report ({sorted(set(metrics['config']))})")
        metrics, curves = metrics[metrics["config"].isin(only)], curves[curves["config"].isin(only)]
    arms = list(read_arms_csv(source / "arms.csv")["arm"])
    own = list(dict.fromkeys(metrics["config"]))
    lines = [f"- Trained at the commit above: configurations {own}."] if own else []
    for folder in folders:
        if folder.resolve() == target.resolve():
            raise StudyError(f"{folder}: the record being written; reuse a committed record under another name")
        metrics, curves, configs = reused_rows(metrics, curves, arms, folder)
        lines.append(reuse_line(folder, configs, arms))
    return metrics, curves, lines
