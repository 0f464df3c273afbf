"""The data steps behind the DVC stages acquire@D, split@D and preprocess@D (stage scripts stay thin).

Each step reads a folder and writes a folder atomically: on any error the previous output stays as it was.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from multitab.config.data import DatasetConfig
from multitab.datasets.preprocess import preprocess
from multitab.datasets.schema import DatasetSchema
from multitab.datasets.split import SPLITS, canonicalize, split_frames
from multitab.datasets.standin import write_standin
from multitab.io import atomic_dir, read_json, sha256_file, write_json

log = logging.getLogger(__name__)

SOURCE_FILE = "source.json"
INFO_FILE = "info.json"
META_FILE = "meta.json"


def acquire(schema: DatasetSchema, cfg: DatasetConfig, out_dir: Path, cache_dir: Path) -> dict[str, Any]:
    """Produce `out_dir/<raw file>.parquet` for every raw file of the dataset, plus source.json."""
    with atomic_dir(out_dir) as tmp:
        if cfg.source == "standin":
            rows = write_standin(schema, cfg.standin.rows, cfg.standin.seed, tmp)
            info: dict[str, Any] = {
                "source": "standin",
                "standin": True,
                "seed": cfg.standin.seed,
                "files": {k: {"rows": n} for k, n in rows.items()},
            }
        elif cfg.source == "local":
            from multitab.datasets.sources import acquire_local

            info = acquire_local(schema, cfg.local, tmp)
        else:
            from multitab.datasets.sources import acquire_remote

            info = acquire_remote(schema, cfg.remote, tmp, cache_dir)
        info["dataset"] = schema.name
        (tmp / SOURCE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def split(schema: DatasetSchema, cfg: DatasetConfig, raw_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Raw files -> canonical train / val / test Parquet + info.json."""
    source = read_json(raw_dir / SOURCE_FILE)
    frames = {}
    for key in schema.raw_files:
        path = raw_dir / f"{key}.parquet"
        frames[key] = canonicalize(schema, pd.read_parquet(path), origin=str(path))
    parts = split_frames(schema, frames, cfg.split)
    del frames
    info = {
        "dataset": schema.name,
        "source": source["source"],
        "standin": bool(source["standin"]),
        "n_rows": {k: len(parts[k]) for k in SPLITS},
    }
    with atomic_dir(out_dir) as tmp:
        for k in SPLITS:
            parts[k].to_parquet(tmp / f"{k}.parquet", index=False)
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    log.info("%s split: %s", schema.name, info["n_rows"])
    return info


def preprocess_splits(
    schema: DatasetSchema, cfg: DatasetConfig, splits_dir: Path, out_dir: Path, *, verdict: Path | None = None
) -> dict[str, Any]:
    """Canonical splits -> processed Parquet + meta.json (fit on train only). `verdict`: validate_raw's verdict,
    which must say success; its warnings (checks the policy let pass) travel on in meta.json ("validation"),
    into every run's metrics.json and the report's banner."""
    validation: dict[str, Any] | None = None
    if verdict is not None:
        if not Path(verdict).is_file():
            raise FileNotFoundError(f"{verdict}: validation verdict not found; run validate_raw@{schema.name} first")
        v = read_json(verdict)
        if v.get("success") is not True:
            raise ValueError(f"{verdict}: the splits of {schema.name} failed validation; see reports/validation/")
        validation = {"policy": v.get("policy", {}), "warnings": list(v.get("warnings", []))}
    info = read_json(splits_dir / INFO_FILE)
    frames = {k: pd.read_parquet(splits_dir / f"{k}.parquet") for k in SPLITS}
    result = preprocess(schema, frames, cfg.preprocess, info)
    del frames
    result.meta["inputs"] = {f"{k}.parquet": sha256_file(splits_dir / f"{k}.parquet") for k in SPLITS}
    if validation is not None:
        result.meta["validation"] = validation
    with atomic_dir(out_dir) as tmp:
        for k in SPLITS:
            result.frames[k].to_parquet(tmp / f"{k}.parquet", index=False)
        write_json(tmp / META_FILE, result.meta)
    return result.meta
