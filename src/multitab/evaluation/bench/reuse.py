"""An attribution record that reuses another record's runs (`python -m multitab.evaluation.bench.attribution
record ... --reuse FOLDER`): the configurations the new report has no run of are taken, for the new report's
arms, from an earlier committed record, rows as they are (their `run`, train_seconds and n_train), so that runs
already trained are not trained again. The header names what came from where, with the earlier record's own
commit and machine: such a record holds runs of two commits, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from multitab.evaluation.bench.numbers import StudyError, read_metrics_csv


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


def reuse_line(folder: Path, configs: list[str], arms: list[str]) -> str:
    """header.md's line saying which configurations came from `folder`, with that record's commit and machine."""
    header = folder / "header.md"
    origin = next((line.removeprefix("- ") for line in header.read_text().splitlines()
                   if line.startswith("- Commit:")), "commit not stated") if header.is_file() else "no header.md"
    return (f"- Reused, not retrained: configurations {configs} (arms {arms}) are the runs of {folder.as_posix()} "
            f"({origin.rstrip('.')}), rows copied as they are.")


def reused_record(source: Path, target: Path, folders: Sequence[Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The report's metrics and curves with each of `folders`' runs of the configurations still lacking, in order
    (bench/reuse.py), and the header lines that say so; read before the record folder is written."""
    from multitab.evaluation.bench.attribution import read_arms_csv

    metrics, curves = read_metrics_csv(source / "metrics.csv"), pd.read_csv(source / "curves.csv")
    arms = list(read_arms_csv(source / "arms.csv")["arm"])
    lines = []
    for folder in folders:
        if folder.resolve() == target.resolve():
            raise StudyError(f"{folder}: the record being written; reuse a committed record under another name")
        metrics, curves, configs = reused_rows(metrics, curves, arms, folder)
        lines.append(reuse_line(folder, configs, arms))
    return metrics, curves, lines
