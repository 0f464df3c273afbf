"""Typed configuration of the data stages: `params.yaml` → `datasets.<name>`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from multitab.config import load_params, section


@dataclass(frozen=True)
class StandinConfig:
    rows: dict[str, int]  # rows per raw file (AliExpress: train, test; others: data)
    seed: int


@dataclass(frozen=True)
class LocalConfig:
    # A file (CSV, gzipped CSV, Parquet or ARFF), a folder, or a .zip / .tar.gz; for datasets with several
    # raw files (AliExpress) a folder or archive holding train.* and test.*. Relative paths are relative to
    # the repository root. dvc.yaml makes it a dependency of acquire@D (params.yaml's default: local/<D>/).
    path: str | None = None


@dataclass(frozen=True)
class RemoteConfig:
    url: str | None = None
    sha256: str | None = None  # checksum of the downloaded file; None = verify nothing (not recommended)
    format: Literal["csv", "csv.gz", "parquet", "arff", "zip", "tar.gz"] = "csv.gz"
    retries: int = 5
    backoff_seconds: float = 2.0
    timeout_seconds: float = 60.0


@dataclass(frozen=True)
class SplitConfig:
    # official_test: keep the source's train/test files, validation = stratified val_fraction of train;
    # shuffle: random val_fraction / test_fraction of all rows; ordered: first val_fraction rows are
    # validation, last test_fraction rows are test (Higgs, as in prior work).
    method: Literal["official_test", "shuffle", "ordered"]
    seed: int
    val_fraction: float
    test_fraction: float = 0.0


@dataclass(frozen=True)
class PreprocessConfig:
    numerical: Literal["quantile", "standard", "none"] = "quantile"
    # FT-Transformer's recipe: n_quantiles = max(min(n_train // 30, max_quantiles), 10), output normal,
    # Gaussian noise of relative std `noise` added once to the training features before fitting.
    max_quantiles: int = 1000
    subsample: int = 1_000_000_000
    noise: float = 1e-3
    seed: int = 0


@dataclass(frozen=True)
class DatasetConfig:
    source: Literal["standin", "local", "remote"]
    standin: StandinConfig
    local: LocalConfig
    remote: RemoteConfig
    split: SplitConfig
    preprocess: PreprocessConfig


def load_dataset_config(name: str, params_path: str | Path = "params.yaml") -> DatasetConfig:
    return section(load_params(params_path), f"datasets.{name}", DatasetConfig, source=str(params_path))
