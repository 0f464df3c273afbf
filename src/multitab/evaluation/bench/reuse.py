"""An attribution record that reuses another record's runs (`python -m multitab.evaluation.bench.attribution
record ... --reuse FOLDER`): the configurations the new report has no run of are taken, for the new report's
arms, from an earlier committed record, rows as they are (their `run`, train_seconds and n_train), so that runs
already trained are not trained again; with `--seeds S ...` (the seeds the report trained) every configuration's
other seeds come from the earlier record instead (a five-seed record from a three-seed one and two new seeds).
The header names what came from where, with the earlier record's own commit and machine: such a record holds
runs of two commits, and says so.

Runs of one configuration can come from more than one commit (a flow stopped and finished later at another):
`runs_by_commit` counts them from flows.progress's index (results/study/progress/index.json: the commit HEAD was at
when each finished run was saved), the header states it (RUNS_BY_COMMIT), and a record reusing that record
repeats it for the configurations it takes.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from multitab.evaluation.bench.numbers import StudyError, read_arms_csv, read_metrics_csv

PROGRESS_INDEX = Path("results/study/progress/index.json")  # flows/progress.py's DEFAULT_DIR, its index
RUNS_BY_COMMIT = "- Runs by commit"
UNSAVED = "not in the index"


def reused_rows(metrics: pd.DataFrame, curves: pd.DataFrame, arms: list[str], folder: Path, by_seed: bool = False
                ) -> tuple[pd.DataFrame, pd.DataFrame, list[str], list[int]]:
    """(metrics, curves) with the rows of record `folder` for `arms` appended: of the configurations `metrics` has
    no row of, or, `by_seed`, of every (configuration, seed) it has no row of; the configurations taken, in the
    earlier record's order, and the seeds taken. StudyError when the earlier record has none, or lacks an arm
    for one of them."""
    other = read_metrics_csv(folder / "metrics.csv")
    if "arm" not in other.columns or not (folder / "curves.csv").is_file():
        raise StudyError(f"{folder}: not an attribution record (metrics.csv with an `arm` column, curves.csv)")
    other_curves = pd.read_csv(folder / "curves.csv", dtype={"config": str, "model": str})
    if by_seed:
        have = set(zip(metrics["config"], metrics["seed"].astype(int), strict=True))
        keep, keep_curves = _not_in(other, have), _not_in(other_curves, have)
    else:
        keep = ~other["config"].isin(set(metrics["config"]))
        keep_curves = ~other_curves["config"].isin(set(metrics["config"]))
    taken = other[other["arm"].isin(arms) & keep]
    configs = list(dict.fromkeys(taken["config"]))
    for config in configs:
        lacking = [arm for arm in arms if taken[(taken.config == config) & (taken.arm == arm)].empty]
        if lacking:
            raise StudyError(f"{folder}: configuration {config} has no run of arm(s) {lacking}; a reused "
                             "configuration needs every arm of the new report")
    if not configs:
        raise StudyError(f"{folder}: every configuration it holds is in the new report already; nothing to reuse")
    curves_taken = other_curves[other_curves["arm"].isin(arms) & other_curves["config"].isin(configs) & keep_curves]
    return (pd.concat([metrics, taken[metrics.columns]], ignore_index=True),
            pd.concat([curves, curves_taken[curves.columns]], ignore_index=True), configs,
            sorted({int(s) for s in taken["seed"]}))


def _not_in(frame: pd.DataFrame, have: set[tuple[str, int]]) -> pd.Series:
    """Whether each row's (config, seed) is not among `have`."""
    pairs = zip(frame["config"], frame["seed"], strict=True)
    return pd.Series([(c, int(s)) not in have for c, s in pairs], index=frame.index, dtype=bool)


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


def _commits_of(lines: list[str], configs: list[str]) -> str:
    """"; runs by commit: p06_pd5_t3: 14 at 9d9ac7d (AMD EPYC), 4 at 5fd4623 (AMD EPYC)" for those of `configs`
    a header's RUNS_BY_COMMIT line names (its own, not nested); "" when none."""
    line = next((x for x in lines if x.startswith(RUNS_BY_COMMIT)), None)
    if line is None:
        return ""
    parts = [p.strip() for p in line.split("): ", 1)[-1].rstrip(".").split("; ")]
    named = [p for p in parts if p.partition(":")[0] in configs]
    return f"; runs by commit: {'; '.join(named)}" if named else ""


def reuse_line(folder: Path, configs: list[str], arms: list[str], seeds: Sequence[int] | None = None) -> str:
    """header.md's lines saying which configurations (and which seeds of them, `seeds`) came from `folder`: those
    trained there, with that record's commit, machine, flow wall time and runs by commit, and, nested, those
    `folder` had itself reused (its own lines, indented), so that a chain of partial records still names the
    commit each configuration was trained at."""
    lines = _header_lines(folder)
    nested = [(sorted(set(block_configs) & set(configs), key=configs.index), block)
              for block_configs, block in _reused_blocks(folder / "header.md", lines)]
    nested = [(taken, block) for taken, block in nested if taken]
    there = [c for c in configs if not any(c in taken for taken, _ in nested)]
    if not lines:
        origin = "no header.md"
    else:
        origin = next((line.removeprefix("- ").rstrip(".") for line in lines if line.startswith("- Commit:")),
                      "commit not stated")
        wall = next((line for line in lines if line.startswith("- Wall time of the whole")), None)
        if wall is not None:
            origin += "; flow wall time " + wall.rsplit(":", 1)[1].strip().rstrip(".")
        origin += _commits_of(lines, there)
    which = f"seeds {sorted(seeds)} of " if seeds else ""
    head = f"{REUSED}{which}configurations {configs} (arms {arms}) are the runs of {folder.as_posix()}"
    if not nested:
        return f"{head} ({origin}), rows copied as they are."
    again = [c for taken, _ in nested for c in taken]
    text = [f"{head}, rows copied as they are: {there} trained there ({origin}); {again} it had itself reused:"
            if there else f"{head}, rows copied as they are; it had itself reused them ({origin}):"]
    for _, block in nested:
        text += ["  " + line for line in block]
    return "\n".join(text)


def runs_by_commit(metrics: pd.DataFrame, index: Path) -> dict[str, Counter[str]]:
    """config -> "<commit, 7 characters> (<CPU>)" -> distinct runs of `metrics` (its `run` column,
    <data>/<model>/<point>/seed<S>) that flows.progress's `index` (run key -> {commit, cpu, ...}) names; a run it
    does not name counts under "not in the index". StudyError naming the file when it is not such an index."""
    try:
        entries = json.loads(index.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StudyError(f"{index}: not readable as flows.progress's index ({e}); restore it from git") from None
    if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
        raise StudyError(f"{index}: not flows.progress's index (run key -> {{entry, commit, cpu, saved}})")
    by_tail: dict[str, str] = {}
    for key, entry in entries.items():
        parts = key.split("-", 1)
        if len(parts) == 2:
            by_tail[parts[1]] = f"{str(entry.get('commit', 'unknown'))[:7]} ({entry.get('cpu', 'CPU not stated')})"
    out: dict[str, Counter[str]] = {}
    for row in metrics.drop_duplicates("run").itertuples():
        data, model, point, seed = str(row.run).split("/")
        tail = f"{data}-{model.replace('@', '+')}-{point}-{seed.removeprefix('seed')}"
        out.setdefault(str(row.config), Counter())[by_tail.get(tail, UNSAVED)] += 1
    return out


def commits_line(counts: dict[str, Counter[str]], index: Path) -> str:
    """header.md's RUNS_BY_COMMIT line of `runs_by_commit`'s counts."""
    each = "; ".join(f"{config}: " + ", ".join(f"{n} {'' if commit == UNSAVED else 'at '}{commit}"
                                               for commit, n in c.most_common()) for config, c in counts.items())
    return (f"{RUNS_BY_COMMIT} (and CPU: the commit HEAD was at when flows.progress saved each finished run, "
            f"{index.as_posix()}): {each}.")


def reused_record(source: Path, target: Path, folders: Sequence[Path], only: Sequence[str] | None = None,
                  seeds: Sequence[int] | None = None, index: Path | None = None
                  ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The report's metrics and curves (those of configurations `only` and of `seeds`, when given: the ones trained
    since the record reused) with each of `folders`' runs of the configurations (or the seeds) still lacking, in
    order, and the header lines that say so (and, with `index`, the runs by commit of those trained here); read
    before the record folder is written."""
    metrics, curves = read_metrics_csv(source / "metrics.csv"), pd.read_csv(source / "curves.csv")
    if only is not None:
        absent = [c for c in only if c not in set(metrics["config"])]
        if absent:
            raise StudyError(f"{source / 'metrics.csv'}: no run of configuration(s) {absent}; --configs names "
                             f"configurations of the report ({sorted(set(metrics['config']))})")
        metrics, curves = metrics[metrics["config"].isin(only)], curves[curves["config"].isin(only)]
    if seeds is not None:
        absent_seeds = sorted(set(seeds) - set(int(s) for s in metrics["seed"]))
        if absent_seeds:
            raise StudyError(f"{source / 'metrics.csv'}: no run of seed(s) {absent_seeds}; --seeds names seeds of the "
                             f"report ({sorted(set(int(s) for s in metrics['seed']))})")
        metrics, curves = metrics[metrics["seed"].isin(seeds)], curves[curves["seed"].isin(seeds)]
    arms = list(read_arms_csv(source / "arms.csv")["arm"])
    own = list(dict.fromkeys(metrics["config"]))
    which = f"seeds {sorted(seeds)} of " if seeds is not None else ""
    lines = [f"- Trained at the commit above: {which}configurations {own}."] if own and folders else []
    if own and index is not None:
        lines.append(commits_line(runs_by_commit(metrics, index), index))
    for folder in folders:
        if folder.resolve() == target.resolve():
            raise StudyError(f"{folder}: the record being written; reuse a committed record under another name")
        metrics, curves, configs, taken_seeds = reused_rows(metrics, curves, arms, folder, by_seed=seeds is not None)
        lines.append(reuse_line(folder, configs, arms, taken_seeds if seeds is not None else None))
    return metrics, curves, lines
