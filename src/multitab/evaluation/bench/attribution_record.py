"""What goes into a committed attribution record (`python -m multitab.evaluation.bench.attribution record`): the
report's runs, those it reuses from earlier records (bench/reuse.py: whole configurations, or with --seeds the
seeds it did not train), those continued past their epoch cap (bench/continued.py, --continued), and header.md,
which says where each came from: the commit and machine, the runs by commit (flows.progress's index, --progress),
and what was reused and continued (the section counts the runs that still ended at a cap: bench/continued.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation.bench.continued import continued_rows
from multitab.evaluation.bench.generator import generator_line
from multitab.evaluation.bench.numbers import StudyError
from multitab.evaluation.bench.reuse import PROGRESS_INDEX, reused_record
from multitab.runtime.provenance import git_commit, machine


def add_record_options(rec: argparse.ArgumentParser) -> None:
    """The attribution record's options beyond every record's (--from, --to, --note, --flow-wall-seconds)."""
    rec.add_argument("--reuse", type=Path, action="append", default=[], help="an earlier attribution record whose "
                     "runs of the configurations the report lacks are taken as they are (bench/reuse.py); "
                     "repeatable, in order")
    rec.add_argument("--configs", nargs="+", help="with --reuse: only these configurations of the report (those "
                     "trained since the reused record); the others come from --reuse")
    rec.add_argument("--seeds", nargs="+", type=int, help="with --reuse: only these seeds of the report (those "
                     "trained since the reused record); every configuration's other seeds come from --reuse")
    rec.add_argument("--continued", type=Path, default=None, help="the runs continued past their epoch cap "
                     "(python -m stages.continue_runs; e.g. results/study/continued), in place of the capped runs")
    rec.add_argument("--retrained", action="store_true", help="with --continued: take a run trained again from "
                     "scratch whose first epochs differ from the capped run's (other kernels) in its place, saying so "
                     "(bench/continued.py)")
    rec.add_argument("--machine", default=None, help="the machine the report's runs trained on, when the record "
                     "is written on another (default: this one); the header names both")
    rec.add_argument("--progress", type=Path, default=PROGRESS_INDEX, help="flows.progress's index, for the "
                     f"runs by commit in the header (default {PROGRESS_INDEX}; left out when absent)")


def record_header(metrics: pd.DataFrame, *, commit: str, machine: str, note: str,
                  flow_wall_seconds: float | None = None) -> list[str]:
    """header.md lines of a committed attribution record: what ran, where, at which commit, and the training
    time per model over the distinct runs (a run two arms share is counted once)."""
    runs = metrics.drop_duplicates("run")
    arm_runs = len(metrics.drop_duplicates(["arm", "run"]))
    rows = sorted({int(x) for x in runs["n_train"].dropna()})
    lines = [f"> {note}", "", f"- Commit: `{commit}`; machine: {machine}.", generator_line(commit),
             f"- Scale: arms {list(dict.fromkeys(metrics['arm']))}, "
             f"configurations {list(dict.fromkeys(runs['config']))}, "
             f"seeds {sorted(int(s) for s in runs['seed'].unique())}, {rows} training rows per run; {len(runs)} "
             f"distinct runs for {arm_runs} arm-runs.",
             "- Training time per model (train_seconds of the distinct runs, sum and per run):"]
    for model, part in runs.groupby("model", sort=False):
        lines.append(f"  - {model}: {part['train_seconds'].sum():.0f} s in {len(part)} runs "
                     f"({part['train_seconds'].mean():.0f} s per run, median {part['epochs'].median():g} epochs)")
    if flow_wall_seconds is not None:
        lines.append(f"- Wall time of the whole `flows.pipeline` run: {flow_wall_seconds:.0f} s.")
    return lines + [""]


def assemble(a: Any) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The record's metrics, curves and header.md lines from the `record` command's arguments; StudyError (nothing
    written) when an option asks for what the inputs do not hold."""
    if (a.configs or a.seeds) and not a.reuse:
        raise StudyError("--configs and --seeds take part of the report; give the rest with --reuse FOLDER")
    index = a.progress if a.progress is not None and Path(a.progress).is_file() else None
    metrics, curves, extra = reused_record(a.source, a.target, a.reuse, a.configs, a.seeds, index)
    if a.continued is not None:
        metrics, curves, lines = continued_rows(metrics, curves, a.continued, retrained=a.retrained)
        extra += lines
    here = machine()
    trained_on = here if a.machine in (None, here) else f"{a.machine} (given; this record written on {here})"
    header = record_header(metrics, commit=git_commit(a.source), machine=trained_on, note=a.note,
                           flow_wall_seconds=a.flow_wall_seconds)
    return metrics, curves, header[:-1] + extra + [""]

