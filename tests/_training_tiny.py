"""Tiny processed datasets and tiny models for the training tests (stand-in shaped, a few hundred rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from multitab.hparams import Hparams

ROOT = Path(__file__).resolve().parents[1]

FEATURES = [
    {"name": "n1", "kind": "numerical", "cardinality": None},
    {"name": "c1", "kind": "categorical", "cardinality": 5},
    {"name": "n2", "kind": "numerical", "cardinality": None},
    {"name": "c2", "kind": "categorical", "cardinality": 3},
]
TASKS = [
    {"name": "click", "type": "binary", "n_classes": None},
    {"name": "marital", "type": "multiclass", "n_classes": 3},
    {"name": "m_jj", "type": "regression", "n_classes": None},
]


def write_tiny_processed(path: Path, *, n: dict[str, int] | None = None, seed: int = 0, standin: bool = True,
                         features: list[dict[str, Any]] | None = None, tasks: list[dict[str, Any]] | None = None
                         ) -> dict[str, Any]:
    """Write data/processed-style Parquet splits + meta.json with learnable targets."""
    n = n or {"train": 600, "val": 200, "test": 200}
    features = features or FEATURES
    tasks = tasks or TASKS
    rng = np.random.default_rng(seed)
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
        for t in tasks:
            noisy = signal + rng.normal(scale=0.5, size=rows)
            if t["type"] == "binary":
                cols[t["name"]] = (noisy > 0).astype(np.int64)
            elif t["type"] == "multiclass":
                edges = np.quantile(noisy, np.linspace(0, 1, t["n_classes"] + 1)[1:-1])
                cols[t["name"]] = np.digitize(noisy, edges).astype(np.int64)
            else:
                cols[t["name"]] = ((noisy - noisy.mean()) / noisy.std()).astype(np.float32)
        pd.DataFrame(cols).to_parquet(path / f"{split}.parquet", index=False)
    meta = {
        "dataset": path.name, "features": features, "tasks": tasks,
        "source": "standin" if standin else "local", "standin": standin, "n_rows": n,
        "target_stats": {t["name"]: {"mean": 1.0, "std": 0.5} for t in tasks if t["type"] == "regression"},
        "inputs": {"seed": str(seed)},
    }
    (path / "meta.json").write_text(json.dumps(meta))
    return meta


class TinyNet(nn.Module):
    """Embeddings + a shared MLP + one head per task; dropout so the RNG state matters for resume."""

    def __init__(self, meta: dict[str, Any], d: int = 8) -> None:
        super().__init__()
        cards = [f["cardinality"] for f in meta["features"] if f["kind"] == "categorical"]
        n_num = sum(f["kind"] == "numerical" for f in meta["features"])
        self.embeddings = nn.ModuleList([nn.Embedding(c, d) for c in cards])
        self.body = nn.Sequential(nn.Linear(n_num + d * len(cards), 32), nn.ReLU(), nn.Dropout(0.1))
        self.tasks = [(t["name"], t["n_classes"] or 1) for t in meta["tasks"]]
        self.heads = nn.ModuleDict({name: nn.Linear(32, k) for name, k in self.tasks})

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = [x_num] + [e(x_cat[:, i]) for i, e in enumerate(self.embeddings)]
        h = self.body(torch.cat(parts, dim=1))
        return {name: self.heads[name](h).squeeze(-1) if k == 1 else self.heads[name](h) for name, k in self.tasks}


class TinyModel(TinyNet):
    """TinyNet as the model registry builds models: `cls(schema=..., **hyperparameters)`."""

    def __init__(self, *, schema: Any, d: int = 8) -> None:
        super().__init__(schema_meta(schema), d=d)


def schema_meta(schema: Any) -> dict[str, Any]:
    """The meta.json view of a DatasetSchema that TinyNet reads."""
    return {"features": [{"name": f.name, "kind": f.kind, "cardinality": f.cardinality} for f in schema.features],
            "tasks": [{"name": t.name, "n_classes": t.n_classes} for t in schema.tasks]}


# The tiny model's hyperparameters: its one constructor keyword and this optimiser (hparams/authors/tiny/tiny.yaml
# in a tiny project, write_tiny_hparams).
TINY_MODEL = {"d": 8}
TINY_OPTIM = {"optimizer": "adamw", "lr": 0.01, "weight_decay": 1e-5, "max_epochs": 100}
TINY_HPARAMS = Hparams(model=TINY_MODEL, optim=TINY_OPTIM, file="hparams/authors/tiny/tiny.yaml")


# The loop's settings the loop tests start from (RunSettings has no defaults: a run's come from its record).
LOOP: dict[str, Any] = {"batch_size": 2048, "optimizer": "adamw", "lr": 1e-3, "weight_decay": 1e-5, "device": "auto",
                        "precision": "fp32", "compile": False, "deterministic": True, "progress": False,
                        "early_stopping_smoothing": None, "on_step": None}


def loop_settings(**kw: Any) -> Any:
    """multitab.training.loop.RunSettings: LOOP with `kw` (seed, max_epochs and patience at least)."""
    from multitab.training.settings import RunSettings

    return RunSettings(**{**LOOP, **kw})


def train_run(spec: Any, config: Any, hparams: Hparams, **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """`run_training` of `spec` under a TrainConfig and resolved hyperparameters, its record resolved as the
    pipeline resolves one (multitab.runs.resolve.settings_for)."""
    from multitab.runs.resolve import settings_for
    from multitab.training.run import run_training

    return run_training(spec, settings_for(config, hparams, model=spec.model, dataset=spec.dataset), **kwargs)


def write_tiny_hparams(root: Path, models: list[str], dataset: str = "tiny") -> None:
    """The hyperparameter files of `models` (run model names) on `dataset` in a project at `root`: the tiny
    model's (TINY_OPTIM), the registry models' the authors' MultiTab-Bench example files; and the protocols'
    overlays (hparams/protocol/)."""
    import shutil

    import yaml

    folder = root / "hparams" / "authors" / dataset
    folder.mkdir(parents=True, exist_ok=True)
    for model in {m.partition("@")[0] for m in models}:
        source = ROOT / "hparams" / "authors" / "multitab_bench" / f"{model}.yaml"
        if source.is_file():
            shutil.copy(source, folder / f"{model}.yaml")
        else:
            (folder / f"{model}.yaml").write_text(yaml.safe_dump({"model": TINY_MODEL, "optim": TINY_OPTIM}))
    shutil.copytree(ROOT / "hparams" / "protocol", root / "hparams" / "protocol", dirs_exist_ok=True)


def register_tiny(monkeypatch: Any, cls: type = TinyModel, name: str = "tiny") -> None:
    """Put a tiny model in the model registry (multitab.models.MODELS) for one test."""
    from multitab.models import MODELS

    monkeypatch.setitem(MODELS, name, cls)


TINY_TRAIN: dict[str, Any] = {
    "device": "auto", "precision": "fp32", "compile": False, "deterministic": True, "num_threads": 1,
    "batch_size": 256, "max_epochs": 2, "max_train_rows": None, "patience": {"default": 5},
    "early_stopping_smoothing": None, "xgboost_early_stopping_rounds": 5, "progress": False,
    "optim": {}, "model_overrides": {}, "hparams": "authors", "variants": {}, "stack_seeds": False,
    "cuda_graph": False, "eval_batch_size": None,
}
# A run group's keys params.yaml writes besides its data, models, seeds and train (a params file writes every key)
GROUP_KEYS: dict[str, Any] = {"opt_in": False, "out": "results/runs", "checkpoints": "results/checkpoints"}


def write_tiny_project(root: Path, *, train: dict[str, Any] | None = None, models: list[str] | None = None,
                       groups: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                       data: Path | None = None, success: bool = True) -> Path:
    """A project folder for `python -m stages.train --run <key> --params <root>/params.yaml`: params.yaml
    with `train` (TINY_TRAIN updated by `train`) and run group `real` (`models` on the processed folder
    data/processed/tiny, seed 0; or `groups`), the data (a copy of `data`, else written), its verdict
    (`success`), the models' hyperparameter files (write_tiny_hparams) and runs.yaml. Returns the params path;
    the run keys are `real-tiny-<model>-0`."""
    import shutil

    import yaml

    from multitab.config import load_params
    from multitab.runs.document import render
    from multitab.runs.types import RUNS_FILE

    root.mkdir(parents=True, exist_ok=True)
    processed = root / "data" / "processed" / "tiny"
    if not processed.exists():
        if data is not None:
            shutil.copytree(data, processed)
        else:
            write_tiny_processed(processed)
    (root / "data" / "validated").mkdir(parents=True, exist_ok=True)
    (root / "data" / "validated" / "tiny.json").write_text(json.dumps({"success": success}))
    groups = groups or {"real": {"data": {"datasets": ["tiny"]}, "models": models or ["tiny"], "seeds": [0],
                                 "train": {}}}
    groups = {name: {**GROUP_KEYS, **group} for name, group in groups.items()}
    raw = {"train": {**TINY_TRAIN, **(train or {})}, "runs": groups, **(extra or {})}
    write_tiny_hparams(root, [m for g in groups.values() for m in g["models"]])
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    (root / RUNS_FILE).write_text(render(load_params(params)))
    return params
