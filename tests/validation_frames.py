"""Valid canonical and processed split frames built from the schema registry, for validation tests.

Stand-in for the split/preprocess stages in tests: small, deterministic, and exactly the formats
ARCHITECTURE.md fixes (features in schema order, then one column per task).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from multitab.datasets.schema import DatasetSchema, get_schema

# Rows of the stand-in in the test params; split fractions come from the repository's params.yaml.
ROWS = {"acs_income": {"data": 3000}, "higgs": {"data": 3000}, "aliexpress": {"train": 2000, "test": 800}}


def _labels(shares: list[float], n: int, rng: np.random.Generator) -> np.ndarray:
    """Exactly the given class shares (rounded), shuffled."""
    counts = np.floor(np.asarray(shares) / sum(shares) * n).astype(int)
    counts[np.argmax(shares)] += n - counts.sum()
    y = np.repeat(np.arange(len(shares)), counts)
    rng.shuffle(y)
    return y.astype(np.int64)


def canonical_frame(schema: DatasetSchema, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {}
    for f in schema.features:
        if f.kind == "numerical":
            lo, hi = (f.low, f.high) if f.low is not None and f.high is not None else (-3.0, 3.0)
            cols[f.name] = rng.uniform(lo, hi, n).astype(np.float32)
        else:
            card = f.cardinality or 2
            lo = int(f.low) if f.low is not None else 0
            hi = int(f.high) if f.high is not None else card - 1
            # A few codes only (at most 8, all frequent): every one appears in train.
            codes = np.linspace(lo, hi, min(card, 8)).round().astype(np.int64)
            cols[f.name] = rng.choice(codes, n)
    for t in schema.tasks:
        if t.type == "regression":
            cols[t.name] = rng.normal(100.0, 20.0, n).astype(np.float32)
        else:
            shares = list(t.class_ratio) if t.class_ratio else [1.0] * (t.n_classes or 2)
            cols[t.name] = _labels(shares, n, rng)
    return pd.DataFrame(cols)


def split_sizes(dataset: str, params: dict) -> dict[str, int]:
    sp = params["datasets"][dataset]["split"]
    rows = ROWS[dataset]
    if sp["method"] == "official_test":
        n_val = int(round(sp["val_fraction"] * rows["train"]))
        return {"train": rows["train"] - n_val, "val": n_val, "test": rows["test"]}
    n = rows["data"]
    n_val, n_test = int(round(sp["val_fraction"] * n)), int(round(sp["test_fraction"] * n))
    return {"train": n - n_val - n_test, "val": n_val, "test": n_test}


def write_params(path: Path, repo_params: Path) -> dict:
    """The repository's params with the test's stand-in sizes."""
    params = yaml.safe_load(repo_params.read_text())
    for name, rows in ROWS.items():
        params["datasets"][name]["source"] = "standin"
        params["datasets"][name]["standin"]["rows"] = rows
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def write_splits(folder: Path, dataset: str, params: dict, seed: int = 0) -> dict[str, pd.DataFrame]:
    schema = get_schema(dataset)
    folder.mkdir(parents=True, exist_ok=True)
    frames = {}
    for i, (split, n) in enumerate(split_sizes(dataset, params).items()):
        frames[split] = canonical_frame(schema, n, seed + i)
        frames[split].to_parquet(folder / f"{split}.parquet", index=False)
    info = {
        "dataset": dataset,
        "source": "standin",
        "standin": True,
        "n_rows": {s: len(f) for s, f in frames.items()},
    }
    (folder / "info.json").write_text(json.dumps(info))
    return frames


def processed_frames(dataset: str, params: dict, seed: int = 0) -> tuple[dict[str, pd.DataFrame], dict]:
    """Processed-format frames and meta.json: standard-normal numerical columns, codes 1..card-1."""
    schema = get_schema(dataset)
    rng = np.random.default_rng(seed)
    frames = {}
    for split, n in split_sizes(dataset, params).items():
        cols: dict[str, np.ndarray] = {}
        for f in schema.features:
            if f.kind == "numerical":
                cols[f.name] = rng.standard_normal(n).astype(np.float32)
            else:
                cols[f.name] = rng.integers(1, (f.cardinality or 2) + 1, n).astype(np.int64)
        for t in schema.tasks:
            if t.type == "regression":
                cols[t.name] = rng.standard_normal(n).astype(np.float32)
            else:
                cols[t.name] = rng.integers(0, t.n_classes or 2, n).astype(np.int64)
        frames[split] = pd.DataFrame(cols)
    meta = {
        "dataset": dataset,
        "features": [
            {"name": f.name, "kind": f.kind, "cardinality": (f.cardinality + 1) if f.cardinality else None}
            for f in schema.features
        ],
        "tasks": [{"name": t.name, "type": t.type, "n_classes": t.n_classes} for t in schema.tasks],
        "source": "standin",
        "standin": True,
        "n_rows": {s: len(f) for s, f in frames.items()},
        "target_stats": {t.name: {"mean": 0.0, "std": 1.0} for t in schema.tasks if t.type == "regression"},
        "inputs": {},
    }
    return frames, meta


def write_processed(folder: Path, frames: dict[str, pd.DataFrame], meta: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, f in frames.items():
        f.to_parquet(folder / f"{split}.parquet", index=False)
    (folder / "meta.json").write_text(json.dumps(meta))
