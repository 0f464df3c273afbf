"""Synthetic metrics.json files for the aggregate tests: the published Table 3 means plus seeded noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from multitab.registry import PAPER_ROWS, REGISTRY, table_order

PUBLISHED = Path(__file__).resolve().parents[1] / "src/multitab/evaluation/paper/published"
# the paper's label -> registry name, in the paper's order (the order the noise is drawn in)
LABELS = {REGISTRY[name].label: name for name in table_order() if REGISTRY[name].label in PAPER_ROWS}
TYPES = {"click": "binary", "conversion": "binary", "income": "binary", "marital": "multiclass",
         "target": "binary"}


def write_run(root: Path, dataset: str, model: str, seed: int, test: dict[str, float | None],
              task_types: dict[str, str], *, standin: bool = True,
              test_mse: dict[str, float] | None = None, curve: list[float] | None = None) -> Path:
    path = root / dataset / model / f"seed{seed}" / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if curve is not None:  # dvclive's layout: plots/metrics/<name>.tsv with columns step, <name>
        folder = path.parent / "dvclive" / "plots" / "metrics"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "val_mean.tsv").write_text("step\tval_mean\n" + "".join(f"{i}\t{v}\n" for i, v in enumerate(curve)))
        (folder / "train_loss.tsv").write_text("step\ttrain_loss\n"
                                               + "".join(f"{i}\t{1 - v}\n" for i, v in enumerate(curve)))
    path.write_text(json.dumps({
        "dataset": dataset, "model": model, "seed": seed, "standin": standin,
        "source": "standin" if standin else "local",
        "task_types": task_types, "test": test, "val": test, "test_mse": test_mse or {},
        "best_epoch": 3, "epochs": 5, "train_seconds": 1.0, "samples_per_second": 100.0, "device": "cpu",
        "torch_version": "2.13.0",
    }))
    return path


def published_runs(root: Path, *, seeds=(0, 1, 2), noise: float = 0.002, standin: bool = True,
                   skip: tuple[tuple[str, str, int], ...] = (), variants: dict[str, str] | None = None) -> None:
    """One metrics.json per (dataset, model, seed): Table 3's mean (as a fraction) + N(0, noise) noise.
    `variants`: extra run names -> the paper label whose numbers they copy (e.g. ablation runs)."""
    t3 = pd.read_csv(PUBLISHED / "paper_table3_test_results.csv")
    rng = np.random.default_rng(0)
    runs = [(model, label) for label, model in LABELS.items()] + list((variants or {}).items())
    for dataset, g in t3.groupby("dataset", sort=False):
        g = g[g.task != "delta_m"]
        types = {t: TYPES.get(t, "regression") for t in g.task}
        for model, label in runs:
            for seed in seeds:
                if (dataset, model, seed) in skip:
                    continue
                test = {t: float(v) / 100 + float(rng.normal(0, noise)) for t, v in zip(g.task, g[label])}
                mse = {t: 1 - v for t, v in test.items() if types[t] == "regression"}
                # learning curve: 3 + seed epochs rising to the mean test metric
                final = float(np.mean(list(test.values())))
                curve = [final - 0.01 * (2 + seed - i) for i in range(3 + seed)]
                write_run(root, str(dataset), model, seed, test, types, standin=standin, test_mse=mse, curve=curve)


def stamp_params(runs_dir: Path, params_path: Path) -> None:
    """Record in every metrics.json under `runs_dir` what `params_path` says about its run (metrics.json's
    `params`, as stages/train.py writes it), so that the aggregate stage takes the fakes as trained under
    those params. Runs the params do not declare get group `real`'s record."""
    from multitab.config import load_params
    from multitab.runs.expand import declared_runs
    from multitab.runs.profiles import run_params

    params = load_params(params_path)
    declared = declared_runs(params)
    for path in sorted(runs_dir.glob("*/*/seed*/metrics.json")):
        record = json.loads(path.read_text())
        key = (record["dataset"], record["model"], record["seed"])
        record["params"] = run_params(params, declared.get(key, "real"), *key[:2])
        path.write_text(json.dumps(record))
