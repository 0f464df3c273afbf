"""Do two checkouts train bit-identical models? A refactoring check (issue 16: "it changes no result").

`run` trains short CPU runs through `multitab.training.run.run_training` (deterministic, 1 thread) of
several models on two small processed datasets it writes itself: a MultiTab-Bench configuration (32
numerical features, 3 regression tasks, the authors' example settings) and a stand-in shaped dataset
(categorical features; binary, multiclass and regression tasks). It keeps each run's metrics.json,
history and checkpoints. `compare` then checks two such folders, made from two checkouts, for equality:
every metric and history value (timings left out) and every tensor of the best and last checkpoints
(model weights, optimiser state, RNG state) bit for bit. The run fingerprint, and metrics.json's
`settings.code`, are left out: they hash the source code, which a refactoring changes by definition.

Run:  PYTHONPATH=<checkout>/src:. python benchmarks/same_results.py run OUT [--models ...]
      python benchmarks/same_results.py compare OUT_A OUT_B [--json results/benchmarks/x.json]
The PYTHONPATH chooses the checkout whose code trains; this file itself only uses APIs both share.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

MODELS = ["stl_mlp", "mmoe", "ple", "stem", "multitab_net", "saint", "ft_transformer", "tab_transformer"]
TIMING = {"train_seconds", "samples_per_second", "epoch_seconds", "data_seconds"}


def write_bench(path: Path) -> None:
    from multitab.datasets.bench import synthesize, write_dataset
    try:
        from multitab.config.data import SplitConfig
    except ImportError:  # a checkout from before the typed config (multitab/config/)
        from multitab.datasets.config import SplitConfig  # type: ignore[no-redef]

    frames, meta = synthesize(
        "p06_pd3_t3", n_samples=3000, n_features=32, correlation=0.6, degrees=[3, 3, 3], noise=0.1, seed=0,
        split=SplitConfig(method="shuffle", seed=0, val_fraction=0.15, test_fraction=0.15), targets="standard",
    )
    write_dataset(path, frames, meta)


def write_standin(path: Path) -> None:
    """Stand-in shaped rows: two numerical, two categorical features; a binary, a 3-class and a regression
    task, all learnable from the features."""
    features = [{"name": "n1", "kind": "numerical", "cardinality": None},
                {"name": "c1", "kind": "categorical", "cardinality": 5},
                {"name": "n2", "kind": "numerical", "cardinality": None},
                {"name": "c2", "kind": "categorical", "cardinality": 3}]
    tasks = [{"name": "click", "type": "binary", "n_classes": None},
             {"name": "marital", "type": "multiclass", "n_classes": 3},
             {"name": "m_jj", "type": "regression", "n_classes": None}]
    n = {"train": 700, "val": 200, "test": 200}
    rng = np.random.default_rng(0)
    path.mkdir(parents=True, exist_ok=True)
    for split, rows in n.items():
        cols: dict[str, np.ndarray] = {}
        signal = np.zeros(rows)
        for f in features:
            if f["kind"] == "numerical":
                cols[f["name"]] = rng.normal(size=rows).astype(np.float32)
                signal += cols[f["name"]]
            else:
                cols[f["name"]] = rng.integers(1, f["cardinality"], size=rows).astype(np.int64)
                signal += (cols[f["name"]] % 2) - 0.5
        noisy = signal + rng.normal(scale=0.5, size=rows)
        cols["click"] = (noisy > 0).astype(np.int64)
        cols["marital"] = np.digitize(noisy, np.quantile(noisy, [1 / 3, 2 / 3])).astype(np.int64)
        cols["m_jj"] = ((noisy - noisy.mean()) / noisy.std()).astype(np.float32)
        pd.DataFrame(cols).to_parquet(path / f"{split}.parquet", index=False)
    meta = {"dataset": "standin_tiny", "features": features, "tasks": tasks, "source": "standin", "standin": True,
            "n_rows": n, "target_stats": {"m_jj": {"mean": 1.0, "std": 0.5}}, "inputs": {}}
    (path / "meta.json").write_text(json.dumps(meta))


def config(models: list[str], precision: str = "fp32") -> Any:
    try:
        from multitab.config.train import TrainConfig
    except ImportError:  # a checkout from before the typed config (multitab/config/)
        from multitab.training.config import TrainConfig  # type: ignore[no-redef]

    return TrainConfig(
        device="cpu", precision=precision,  # type: ignore[arg-type]
        compile=False, deterministic=True, num_threads=1, batch_size=256, max_epochs=4, max_train_rows=None,
        patience={"default": 5}, xgboost_early_stopping_rounds=5, progress=False,
    )


def run(out: Path, models: list[str]) -> None:
    import subprocess

    import multitab
    from multitab.training.run import RunSpec, run_training

    try:  # hyperparameters as data (multitab.hparams); an older package chose them inside run_training
        from multitab.hparams import BENCH, for_run, selection_file
    except ImportError:
        for_run = None
    try:  # a run's record (multitab.runs.resolve); an older package took the TrainConfig and the hyperparameters
        from multitab.runs.resolve import settings_for
    except ImportError:
        settings_for = None

    out.mkdir(parents=True, exist_ok=True)
    package = Path(multitab.__file__).parent
    commit = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True).stdout.strip()
    (out / "info.json").write_text(json.dumps({"package": str(package), "commit": commit,
                                               "uncommitted_changes": bool(dirty),
                                               "torch": torch.__version__, "models": models}, indent=1))
    data = {"p06_pd3_t3": out / "data" / "p06_pd3_t3", "standin_tiny": out / "data" / "standin_tiny"}
    write_bench(data["p06_pd3_t3"])
    write_standin(data["standin_tiny"])
    cfg = config(models)
    for dataset, path in data.items():
        for model in models:
            run_dir = out / "runs" / dataset / model
            if run_dir.exists():
                shutil.rmtree(run_dir)
            spec = RunSpec(dataset=dataset, model=model, seed=0, data_path=path, checkpoint_dir=run_dir / "ckpt")
            if for_run is None:
                record, history = run_training(spec, cfg)  # type: ignore[call-arg]
            else:  # both datasets are MultiTab-Bench shaped: the authors' MultiTab-Bench selection
                file = selection_file("authors", BENCH, model)
                hp = for_run(package.parents[1], file, model=model, dataset=dataset, point=None, config=cfg)
                if settings_for is None:
                    record, history = run_training(spec, cfg, hp)  # type: ignore[call-arg]
                else:
                    record, history = run_training(spec, settings_for(cfg, hp, model=model, dataset=dataset))
            (run_dir / "metrics.json").write_text(json.dumps(record, indent=1))
            (run_dir / "history.json").write_text(json.dumps(history, indent=1))
            print(f"{dataset}/{model}: test_mean {record['test_mean']}, {record['train_seconds']} s", flush=True)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _without_code(record: dict[str, Any]) -> dict[str, Any]:
    """metrics.json without `settings.code` (the source hash; absent in older records)."""
    settings = record.get("settings")
    if isinstance(settings, dict) and "code" in settings:
        record = {**record, "settings": {k: v for k, v in settings.items() if k != "code"}}
    return record


def _tensors_equal(a: Any, b: Any, where: str, diffs: list[str]) -> None:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            diffs.append(f"{where}: tensors differ")
    elif isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            diffs.append(f"{where}: keys {sorted(map(str, set(a) ^ set(b)))} differ")
        for k in (set(a) & set(b)) - TIMING:
            _tensors_equal(a[k], b[k], f"{where}.{k}", diffs)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            diffs.append(f"{where}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            _tensors_equal(x, y, f"{where}[{i}]", diffs)
    elif _strip(a) != _strip(b):
        diffs.append(f"{where}: {a!r} != {b!r}")


def compare(a: Path, b: Path) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for run_a in sorted((a / "runs").glob("*/*")):
        name = f"{run_a.parent.name}/{run_a.name}"
        run_b = b / "runs" / name
        diffs: list[str] = []
        if not run_b.exists():
            report[name] = ["missing in " + str(b)]
            continue
        for f in ("metrics.json", "history.json"):
            ra, rb = json.loads((run_a / f).read_text()), json.loads((run_b / f).read_text())
            if f == "metrics.json":
                ra, rb = _without_code(ra), _without_code(rb)
            if _strip(ra) != _strip(rb):
                diffs.append(f"{f} differs")
        for ck in ("best.pt", "last.pt"):
            ca = torch.load(run_a / "ckpt" / ck, weights_only=True)
            cb = torch.load(run_b / "ckpt" / ck, weights_only=True)
            for key in ("fingerprint", "settings", "run_settings", "train_seconds", "loop_seconds"):
                ca.pop(key, None)
                cb.pop(key, None)
            _tensors_equal(ca, cb, ck, diffs)
        report[name] = diffs
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--models", nargs="+", default=MODELS)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args.out, args.models)
        return 0
    report = compare(args.a, args.b)
    for name, diffs in report.items():
        print(f"{name}: {'identical' if not diffs else '; '.join(diffs[:5])}")
    same = bool(report) and not any(report.values())
    print("ALL IDENTICAL" if same else "DIFFERENCES FOUND")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        info = {k: json.loads((d / "info.json").read_text()) if (d / "info.json").exists() else None
                for k, d in (("a", args.a), ("b", args.b))}
        args.json.write_text(json.dumps({"identical": same, "checkouts": info, "runs": report}, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
