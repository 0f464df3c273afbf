"""Runs that reached their epoch cap still improving, continued until early stopping ends them (the paper's rule:
early stopping with its patience and no cap that binds; docs/study.md, "Five seeds").

    python -m stages.continue_runs list [--runs 'attribution-*'] [--record results/study/<record>]
    python -m stages.continue_runs run  [--runs 'attribution-*'] [--record results/study/<record>] [--safety-cap 200]

A run of runs.yaml (matching --runs) is capped when its metrics.json says it was not ended by early stopping: it
stopped at its `max_epochs` with fewer than `patience` epochs since its best. With --record the capped runs are
those of a committed record's metrics.csv instead (their keys found in runs.yaml by their run folder, so the
group's seeds must include theirs; --runs, when given, keeps those whose key matches, e.g. the configurations whose
data this checkout has made). `list` prints them; `run` continues each under the epoch budget --safety-cap
(far above any run's stopping epoch: a run that reaches it is counted by the record, zero is the goal):

- from its own checkpoint when it is there (copied into --checkpoints first, so that the train stage's own
  checkpoint stays the capped run's; training.checkpoint's `budget_only` lets a checkpoint continue under a
  larger budget), else from scratch, which training's determinism makes the same run;
- its first epochs (as many as the capped run had) checked against the capped run's curves: exactly against
  its dvclive log (its run folder, or flows.progress's saved copy), else to the 6 significant digits of the
  record's curves.csv;
- written, outside DVC, to --out/<its run folder>: metrics.json, the dvclive log and continuation.json (the
  capped run, the safety cap, where it started, the check, the commit and the CPU). A continued run is not
  continued again; a killed one resumes from its checkpoint. continuation.json names the CPU's kernels too
  (`kernels`: PyTorch's CPU capability and the ISA caps set), since a run continued on other kernels than it
  was trained on does not repeat its first epochs.

The record command takes the continuations in place of the capped runs (`python -m
multitab.evaluation.bench.attribution record ... --continued results/study/continued`).
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.config import Params, load_params
from multitab.evaluation.bench.continued import FROM_SCRATCH
from multitab.evaluation.bench.numbers import StudyError, read_metrics_csv
from multitab.evaluation.bench.same_results import run_files, saved_index, saved_run, tsv_curve
from multitab.files.io import atomic_dir, read_json, write_json
from multitab.runs.document import check_current
from multitab.runs.expand import expand
from multitab.runs.record import RunConfig
from multitab.runs.types import KEY, RUNS_FILE, Run
from multitab.runtime.provenance import cpu_model, git_commit
from multitab.training.run import RunSpec, run_training
from stages._common import parser, run
from stages.train import check_verdict, write_dvclive

log = logging.getLogger("stages.continue_runs")

SAFETY_CAP = 200
OUT = Path("results/study/continued")
CHECKPOINTS = Path("results/continued_checkpoints")
CONTINUATION = "continuation.json"
CURVES = ("val_mean", "train_loss")
ISA_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


@dataclass
class Capped:
    """A run that reached its cap without early stopping: its key, run, record, folder and what it did."""

    key: str
    run: Run
    written: dict[str, Any]
    folder: str  # <data>/<model>[/<point>]/seed<S>, under its group's runs folder and --out
    original: dict[str, Any]  # epochs, best_epoch, max_epochs, source
    reference: dict[str, dict[int, float]]  # curve -> epoch (1-based) -> value of the capped run
    precision: str  # "exact" or "6 significant digits"


def kernels() -> str:
    """The capability PyTorch's CPU kernels run at here, and the variables that cap it (ISA_ENV): the CPU's model
    name alone does not tell an AVX2 run from an AVX-512 one, and their float results part (docs/study.md)."""
    import torch

    caps = ", ".join(f"{k}={os.environ[k]}" for k in ISA_ENV if os.environ.get(k)) or "none set"
    return f"PyTorch CPU capability {torch.backends.cpu.get_cpu_capability()}; ISA caps: {caps}"


def _runs(params: Params, root: Path) -> dict[str, tuple[Run, dict[str, Any]]]:
    written = check_current(params, root / RUNS_FILE)[KEY]
    return {k: (r, written[k]) for k, r in expand(params).items() if k in written}


def _folder(params: Params, run_: Run) -> str:
    return run_.out.removeprefix(params.runs[run_.group].out.rstrip("/") + "/")


def runs_by_folder(params: Params, root: Path) -> dict[str, tuple[str, Run, dict[str, Any]]]:
    """runs.yaml's runs (key, run, record) by their folder under their group's runs folder, as records name them
    (a folder two groups share: the first group's run)."""
    found: dict[str, tuple[str, Run, dict[str, Any]]] = {}
    for key, (run_, written) in _runs(params, root).items():
        found.setdefault(_folder(params, run_), (key, run_, written))
    return found


def run_of(by_folder: dict[str, tuple[str, Run, dict[str, Any]]], folder: str,
           source: Path) -> tuple[str, Run, dict[str, Any]]:
    """The run a record (`source`) names by its folder, or an error that says how to put it in runs.yaml."""
    if folder not in by_folder:
        raise StudyError(f"{source}: run {folder} is not in {RUNS_FILE}; put its seed in the run group's seeds and "
                         "run `python -m multitab.runs --groups <group>`")
    return by_folder[folder]


def train_again(root: Path, key: str, run_: Run, written: dict[str, Any], max_epochs: int,
                checkpoint_dir: Path) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """runs.yaml's run `key` trained again under the epoch budget `max_epochs` (all else as its record says), its
    checkpoints in `checkpoint_dir` (resumed from one there); its metrics record and per-epoch history."""
    config = RunConfig.from_record(written, f"{RUNS_FILE}: {KEY}.{key}")
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, max_epochs=max_epochs))
    check_verdict(root / run_.verdict, run_.dataset)
    spec = RunSpec(dataset=run_.dataset, model=run_.model, seed=run_.seed, data_path=root / run_.data,
                   checkpoint_dir=checkpoint_dir)
    return run_training(spec, config)


def from_runs(params: Params, root: Path, pattern: str) -> list[Capped]:
    """The capped runs of runs.yaml whose key matches `pattern` (their metrics.json and dvclive log, exact)."""
    found = []
    for key, (run_, written) in _runs(params, root).items():
        path = root / run_.out / "metrics.json"
        if not fnmatch.fnmatchcase(key, pattern) or not path.is_file():
            continue
        record = read_json(path)
        if record.get("stopped_early") is False:
            files = run_files(root / run_.out)
            reference = {c: {s + 1: v for s, v in tsv_curve(files[f"dvclive/{c}.tsv"]).items()} for c in CURVES}
            found.append(Capped(key, run_, written, _folder(params, run_), _original(record, path.as_posix()),
                                reference, "exact"))
    return found


def _original(record: dict[str, Any], source: str) -> dict[str, Any]:
    """What the capped run did, as plain JSON values."""
    return {"source": source, **{k: int(record[k]) for k in ("epochs", "best_epoch", "max_epochs")},
            "stopped_early": bool(record.get("stopped_early"))}


def from_record(params: Params, root: Path, record: Path, progress: Path) -> list[Capped]:
    """The capped runs of a committed record (its metrics.csv's `run`, stopped_early false), each found in
    runs.yaml by its run folder; the reference curves from flows.progress's saved copy when it has the run
    (exact), else the record's curves.csv (6 significant digits)."""
    metrics = read_metrics_csv(record / "metrics.csv")
    if "arm" not in metrics.columns or "run" not in metrics.columns or not (record / "curves.csv").is_file():
        raise StudyError(f"{record}: not an attribution record (metrics.csv with `arm` and `run`, curves.csv)")
    curves = pd.read_csv(record / "curves.csv")
    capped = metrics[metrics["stopped_early"].astype(str).str.lower() != "true"].drop_duplicates("run")
    by_folder = runs_by_folder(params, root)
    saved = saved_index(progress) if (progress / "index.json").is_file() else {}
    found = []
    for row in capped.itertuples():
        key, run_, written = run_of(by_folder, row.run, record / "metrics.csv")
        original = _original({k: getattr(row, k) for k in ("epochs", "best_epoch", "max_epochs")},
                             f"{record.as_posix()} (metrics.csv, curves.csv)")
        if key in saved:
            files = saved_run(progress, key)
            reference = {c: {s + 1: v for s, v in tsv_curve(files[f"dvclive/{c}.tsv"]).items()} for c in CURVES}
            original["source"] = f"{progress.as_posix()} (flows.progress's saved {key})"
            precision = "exact"
        else:
            part = curves[(curves.arm == row.arm) & (curves.config == row.config) & (curves.model == row.model)
                          & (curves.seed == row.seed)]
            reference = {c: dict(zip(part["epoch"].astype(int), part[c].astype(float), strict=True)) for c in CURVES}
            precision = "6 significant digits"
        found.append(Capped(key, run_, written, row.run, original, reference, precision))
    return found


def check_first_epochs(history: list[dict[str, float]], capped: Capped) -> dict[str, Any]:
    """The continued run's first epochs against the capped run's curves (capped.precision)."""
    epochs = int(capped.original["epochs"])
    first: dict[str, Any] | None = None
    for row in history[:epochs]:
        for curve in CURVES:
            a, b = capped.reference[curve].get(int(row["epoch"])), float(row[curve])
            same = a == b if capped.precision == "exact" else a is not None and f"{a:.6g}" == f"{b:.6g}"
            if not same and first is None:
                first = {"epoch": int(row["epoch"]), "curve": curve, "capped": a, "continued": b}
    return {"epochs": epochs, "curves": list(CURVES), "precision": capped.precision,
            "identical": first is None and len(history) >= epochs, "first_difference": first}


def continue_one(root: Path, capped: Capped, out: Path, checkpoints: Path, cap: int) -> dict[str, Any] | None:
    """Continue one capped run (module docstring); its continuation.json, or None when it was done before."""
    target = out / capped.folder
    if (target / CONTINUATION).is_file():
        done = read_json(target / CONTINUATION)
        if done.get("run") == capped.key and done.get("original", {}).get("epochs") == capped.original["epochs"]:
            log.info("%s: continued already (%s)", capped.key, target / CONTINUATION)
            return None
    ckpt = checkpoints / capped.folder
    own = root / capped.run.checkpoints
    copied = False
    if not (ckpt / "last.pt").is_file() and (own / "last.pt").is_file():
        with atomic_dir(ckpt) as tmp:
            for name in ("last.pt", "best.pt"):
                if (own / name).is_file():
                    shutil.copy2(own / name, tmp / name)
        copied = True
    record, history = train_again(root, capped.key, capped.run, capped.written, cap, ckpt)
    record |= {"group": capped.run.group, "stacked": None, "params": capped.written["params"]}
    if capped.written.get("attribution") is not None:
        record["attribution"] = capped.written["attribution"]
    start = ("resumed from the capped run's own checkpoint" if copied and record["resumed_from_epoch"] > 0 else
             f"{FROM_SCRATCH} (no usable checkpoint of the capped run)" if record["resumed_from_epoch"] == 0
             else f"resumed from its continuation's checkpoint at epoch {record['resumed_from_epoch']}")
    info = {"run": capped.key, "run_folder": capped.folder, "original": capped.original, "safety_cap": cap,
            "start": start, "first_epochs": check_first_epochs(history, capped),
            "result": {k: record[k] for k in ("epochs", "best_epoch", "stopped_early")},
            "commit": git_commit(root), "cpu": cpu_model(), "kernels": kernels(),
            "finished": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    write_dvclive(history, target / "dvclive")
    write_json(target / "metrics.json", record)
    write_json(target / CONTINUATION, info)
    return info


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["list", "run"])
    p.add_argument("--runs", default=None, help="which runs of runs.yaml (a glob over keys; default "
                   "'attribution-*', with --record every capped run of the record)")
    p.add_argument("--record", type=Path, default=None, help="the capped runs of this committed record instead")
    p.add_argument("--progress", type=Path, default=Path("results/study/progress"), help="flows.progress's folder")
    p.add_argument("--safety-cap", type=int, default=SAFETY_CAP, help=f"the epoch budget (default {SAFETY_CAP})")
    p.add_argument("--out", type=Path, default=OUT, help=f"where continued runs go (default {OUT})")
    p.add_argument("--checkpoints", type=Path, default=CHECKPOINTS, help=f"their checkpoints (default {CHECKPOINTS})")
    a = p.parse_args(argv)

    def body() -> None:
        params = load_params(a.params)
        root = Path(a.params).parent
        found = (from_record(params, root, a.record, root / a.progress) if a.record is not None
                 else from_runs(params, root, a.runs or "attribution-*"))
        if a.record is not None and a.runs is not None:
            found = [c for c in found if fnmatch.fnmatchcase(c.key, a.runs)]
        for capped in found:
            o = capped.original
            print(f"{capped.key}: {o['epochs']} of {o['max_epochs']} epochs, best {o['best_epoch']} ({capped.folder})")
        if a.action == "run":
            for capped in found:
                info = continue_one(root, capped, root / a.out, root / a.checkpoints, a.safety_cap)
                if info is not None:
                    print(json.dumps({k: info[k] for k in ("run", "start", "result")} |
                                     {"first_epochs_identical": info["first_epochs"]["identical"]}))
        print(f"{len(found)} capped run(s)")

    return run(f"continue_runs {a.action}", body)


if __name__ == "__main__":
    raise SystemExit(main())
