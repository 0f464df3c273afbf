"""Whether today's code trains what a record's runs were (docs/study.md, "Five seeds"): the same runs trained again
at a new commit, compared field by field with the runs flows.progress saved when they were first trained.

    python -m multitab.evaluation.bench.same_results --runs results/attribution_runs \\
        --keys 'attribution-p10_pd3_t3_ho_std_fixed-*-0' --to results/study/same_results_p10_pd3_t3_seed0 --note "..."

flows.progress keeps each finished run in the repository (results/study/progress/, laid out as DVC's cache: index.json
names each run key's run-cache entry, the entry names the md5 of its outputs, metrics.json and the dvclive folder).
`saved_run` reads a run's saved files from there; `compare` sets each new run (its folder under --runs) beside
its saved twin: every metric of metrics.json (test and validation per task, the MSEs, best epoch, epochs, whether
early stopping ended it) and every epoch of its dvclive curves, compared exactly (Python floats as JSON and
dvclive write them: bit for bit). A new run whose timing fields equal the saved one's too was restored from DVC's
cache, not trained again, and is refused (it shows nothing about today's code).

The record folder: `runs.csv` (one row per run and field: saved and new values, equal or not), `header.md` (the
note, the commit and machine of the new runs, and those of the saved ones from the index) and `section.md`.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.evaluation.bench.generator import generator_line
from multitab.evaluation.bench.numbers import StudyError
from multitab.files.yaml_data import YAMLError, load_yaml

PROGRESS = Path("results/study/progress")
COLUMNS = ["run", "field", "saved", "new", "equal"]
METRIC_FIELDS = ("test", "val", "test_mse", "test_mse_standardised")
SCALARS = ("best_epoch", "epochs", "max_epochs", "stopped_early")
TIMING = ("train_seconds", "samples_per_second")


def _object(progress: Path, md5: str) -> Path:
    return progress / "files" / "md5" / md5[:2] / md5[2:]


def saved_index(progress: Path) -> dict[str, dict[str, Any]]:
    """flows.progress's index.json: run key -> {entry, commit, cpu, saved}; StudyError naming the file."""
    path = progress / "index.json"
    try:
        index = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StudyError(f"{path}: not readable ({e}); restore it from git") from None
    if not isinstance(index, dict):
        raise StudyError(f"{path}: not flows.progress's index (run key -> its entry)")
    return index


def saved_run(progress: Path, key: str) -> dict[str, Path]:
    """The saved outputs of run `key`: "metrics.json" and "dvclive/<name>.tsv" -> the object holding it.
    StudyError when the index does not name the run or an object is missing."""
    index = saved_index(progress)
    if key not in index:
        raise StudyError(f"{progress / 'index.json'}: no saved run {key}; `make layers-save` saves finished runs")
    entry_path = progress / str(index[key]["entry"])
    try:
        entry = load_yaml(entry_path.read_text())
    except (OSError, YAMLError) as e:
        raise StudyError(f"{entry_path}: the run-cache entry of {key} is not readable ({e})") from None
    files: dict[str, Path] = {}
    for out in entry.get("outs") or []:
        path, md5 = str(out.get("path", "")), str(out.get("md5", ""))
        if path.endswith("metrics.json"):
            files["metrics.json"] = _object(progress, md5)
        elif md5.endswith(".dir"):
            for item in json.loads(_object(progress, md5).read_text()):
                files[f"dvclive/{item['relpath']}"] = _object(progress, str(item["md5"]))
    missing = [name for name, p in files.items() if not p.is_file()]
    if "metrics.json" not in files or missing:
        raise StudyError(f"{entry_path}: the saved outputs of {key} are incomplete ({missing or 'no metrics.json'})")
    return files


def tsv_curve(path: Path) -> dict[int, float]:
    """step -> value of a dvclive .tsv, read exactly (each value as Python parses its text)."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    return {int(r[0]): float(r[1]) for r in rows[1:] if r}


def run_files(run_dir: Path) -> dict[str, Path]:
    """A trained run's folder as `saved_run` lists a saved one."""
    files = {"metrics.json": run_dir / "metrics.json"}
    for tsv in sorted((run_dir / "dvclive" / "plots" / "metrics").glob("*.tsv")):
        files[f"dvclive/{tsv.name}"] = tsv
    return files


def compare(key: str, saved: dict[str, Path], new: dict[str, Path]) -> list[dict[str, Any]]:
    """Rows (COLUMNS) comparing run `key`'s saved files with its new ones: every metric, the scalars and every
    epoch of every curve both have (the timing curves aside). StudyError when the new run's timing equals the
    saved one's: it was restored from DVC's cache, not trained again."""
    old, now = json.loads(saved["metrics.json"].read_text()), json.loads(new["metrics.json"].read_text())
    if all(old.get(t) == now.get(t) for t in TIMING):
        raise StudyError(f"{key}: its train_seconds and samples_per_second equal the saved run's: it was restored "
                         "from DVC's cache, not trained again; train it at this commit (docs/study.md, \"Five seeds\")")
    rows = []
    for field in METRIC_FIELDS:
        for task in sorted(set(old.get(field) or {}) | set(now.get(field) or {})):
            a, b = (old.get(field) or {}).get(task), (now.get(field) or {}).get(task)
            rows.append({"run": key, "field": f"{field}.{task}", "saved": a, "new": b, "equal": a == b})
    rows += [{"run": key, "field": f, "saved": old.get(f), "new": now.get(f), "equal": old.get(f) == now.get(f)}
             for f in SCALARS]
    for name in sorted(set(saved) & set(new)):
        stem = name.removeprefix("dvclive/").removesuffix(".tsv")
        if not name.startswith("dvclive/") or stem in ("epoch_seconds", "data_seconds", "samples_per_second"):
            continue
        a_curve, b_curve = tsv_curve(saved[name]), tsv_curve(new[name])
        for step in sorted(set(a_curve) | set(b_curve)):
            a, b = a_curve.get(step), b_curve.get(step)
            rows.append({"run": key, "field": f"{stem}@{step + 1}", "saved": a, "new": b, "equal": a == b})
    return rows


def section(table: pd.DataFrame, header: Sequence[str]) -> str:
    """section.md: per run, how many fields it compares and whether all are equal; then the first differences."""
    lines = ["## Same results: runs trained again at a new commit against their saved twins", "", *header]
    runs = table.groupby("run", sort=False)["equal"].agg(["size", "sum"])
    same = int((runs["size"] == runs["sum"]).sum())
    lines += [f"**{same} of {len(runs)} runs bit-identical** in every compared field (test and validation metrics "
              "per task, MSEs, best epoch, epochs, early stopping, and every epoch of every dvclive curve but the "
              "timing ones).", "", "| Run | Fields compared | Equal |", "|---|---|---|"]
    lines += [f"| {run} | {int(r['size'])} | {int(r['sum'])} |" for run, r in runs.iterrows()]
    differ = table[~table["equal"]]
    if len(differ):
        lines += ["", "First differences (saved → new):", ""]
        lines += [f"- {r.run} {r.field}: {r.saved} → {r.new}" for r in differ.head(20).itertuples()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from multitab.evaluation.bench.study import write_csv, write_text
    from multitab.runtime.provenance import git_commit, machine

    p = argparse.ArgumentParser(prog="python -m multitab.evaluation.bench.same_results", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--runs", type=Path, required=True, help="the runs folder the new runs were trained into")
    p.add_argument("--keys", required=True, help="which saved runs (a glob over run keys, e.g. '*-p10_pd3_t3_*-0')")
    p.add_argument("--progress", type=Path, default=PROGRESS, help=f"flows.progress's folder (default {PROGRESS})")
    p.add_argument("--to", dest="target", type=Path, required=True)
    p.add_argument("--note", required=True)
    a = p.parse_args(argv)
    try:
        index = saved_index(a.progress)
        keys = sorted(k for k in index if fnmatch.fnmatchcase(k, a.keys))
        if not keys:
            raise StudyError(f"{a.progress / 'index.json'}: no saved run matches {a.keys!r}")
        rows: list[dict[str, Any]] = []
        for key in keys:
            saved = saved_run(a.progress, key)
            folder = _run_folder(a.runs, key, json.loads(saved["metrics.json"].read_text()))
            if not (folder / "metrics.json").is_file():
                raise StudyError(f"{folder}: no metrics.json; train {key} at this commit first")
            rows += compare(key, saved, run_files(folder))
        table = pd.DataFrame.from_records(rows, columns=COLUMNS)
        commit = git_commit(a.runs)
        old = sorted({f"{index[k]['commit'][:7]} ({index[k].get('cpu', '?')})" for k in keys})
        header = [f"> {a.note}", "", f"- Commit: `{commit}`; machine: {machine()} (the new runs).",
                  generator_line(commit), f"- Saved runs compared: {len(keys)}, trained at {', '.join(old)} "
                  f"({(a.progress / 'index.json').as_posix()}).", ""]
        a.target.mkdir(parents=True, exist_ok=True)
        write_csv(table, a.target / "runs.csv")
        write_text("\n".join(header) + "\n", a.target / "header.md")
        write_text(section(table, header), a.target / "section.md")
        print(section(table, []).splitlines()[2])
    except (StudyError, OSError) as e:
        print(f"bench.same_results: {e}", file=sys.stderr)
        return 1
    return 0


def _run_folder(runs: Path, key: str, saved: dict[str, Any]) -> Path:
    """The new run's folder under `runs`: <data>/<model>/<point>/seed<S> from the saved metrics.json's dataset,
    model and seed and the key's point (what lies between the model and the seed)."""
    data, model, seed = str(saved["dataset"]), str(saved["model"]), int(saved["seed"])
    head = f"-{data}-{model.replace('@', '+')}-"
    point = key.split(head, 1)[1].rsplit("-", 1)[0] if head in key else ""
    folder = runs / data / model
    return folder / point / f"seed{seed}" if point and point != str(seed) else folder / f"seed{seed}"


if __name__ == "__main__":
    raise SystemExit(main())
