"""split@D and preprocess@D a column at a time (steps.split, preprocess_columns.preprocess_files) against the
whole-frame reference path (canonicalize + split_frames, preprocess.preprocess, then DataFrame.to_parquet
with the project's options, multitab.datasets.columnar.parquet_options):
the same files, byte for byte, with several row groups and transform blocks per split."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from multitab.config import load_params
from multitab.config.data import DatasetConfig, SplitConfig, StandinConfig
from multitab.datasets import columnar, preprocess_columns, steps
from multitab.datasets.columnar import parquet_options
from multitab.datasets.preprocess import preprocess
from multitab.datasets.schema import get_schema
from multitab.datasets.split import SPLITS, SplitError, canonicalize, split_frames

ROOT = Path(__file__).resolve().parents[1]
ROW_GROUP = 1000  # instead of 1,048,576: several row groups per file at test sizes


def options(df: pd.DataFrame) -> dict[str, Any]:
    return parquet_options(pa.Schema.from_pandas(df, preserve_index=False))


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", ROW_GROUP)
    monkeypatch.setattr(preprocess_columns, "BLOCK_ROWS", 777)


def _config(name: str, rows: dict[str, int], split: SplitConfig | None = None, **prep: object) -> DatasetConfig:
    cfg = load_params(ROOT / "params.yaml").dataset(name)
    cfg = dataclasses.replace(cfg, source="standin", standin=StandinConfig(rows=rows, seed=3))
    if split is not None:
        cfg = dataclasses.replace(cfg, split=split)
    return dataclasses.replace(cfg, preprocess=dataclasses.replace(cfg.preprocess, **prep))


def _reference_split(name: str, cfg: DatasetConfig, raw: Path, out: Path) -> None:
    schema = get_schema(name)
    frames = {k: canonicalize(schema, pd.read_parquet(raw / f"{k}.parquet"), k) for k in schema.raw_files}
    out.mkdir(parents=True)
    for k, part in split_frames(schema, frames, cfg.split).items():
        part.to_parquet(out / f"{k}.parquet", index=False, row_group_size=ROW_GROUP, **options(part))


def _same_files(a: Path, b: Path, names: list[str]) -> None:
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), f"{n} differs"


@pytest.mark.parametrize(("name", "rows", "split"), [
    ("aliexpress", {"train": 4000, "test": 1500}, None),
    ("acs_income", {"data": 3000}, None),
    ("higgs", {"data": 3000}, None),
    ("higgs", {"data": 3000}, SplitConfig("stratified", 42, 0.05, 0.05)),
])
def test_split_by_columns_writes_the_reference_files(
    tmp_path: Path, name: str, rows: dict[str, int], split: SplitConfig | None
) -> None:
    schema, cfg = get_schema(name), _config(name, rows, split)
    steps.acquire(schema, cfg, tmp_path / "raw", tmp_path / "cache")
    steps.split(schema, cfg, tmp_path / "raw", tmp_path / "splits")
    _reference_split(name, cfg, tmp_path / "raw", tmp_path / "reference")
    _same_files(tmp_path / "splits", tmp_path / "reference", [f"{k}.parquet" for k in SPLITS])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch columns left behind"


@pytest.mark.parametrize(("name", "prep"), [
    ("higgs", {}),  # quantile with noise (the default), raw targets
    ("higgs", {"targets": "standard", "subsample": 1500}),  # the quantiles from a subsample of train
    ("higgs", {"numerical": "standard"}),
    ("aliexpress", {"numerical": "none", "noise": 0.0}),
    ("acs_income", {}),
])
def test_preprocess_by_columns_writes_the_reference_files(tmp_path: Path, name: str, prep: dict) -> None:
    schema = get_schema(name)
    rows = {"train": 3000, "test": 1200} if name == "aliexpress" else {"data": 3500}
    cfg = _config(name, rows, **prep)
    steps.acquire(schema, cfg, tmp_path / "raw", tmp_path / "cache")
    steps.split(schema, cfg, tmp_path / "raw", tmp_path / "splits")
    splits = tmp_path / "splits"
    if name == "higgs":  # NaN in val and test (kept as NaN by acquire; the quantile map passes it through)
        for k in ("val", "test"):
            df = pd.read_parquet(splits / f"{k}.parquet")
            df.loc[[0, 5], "lepton_eta"] = np.nan
            df.to_parquet(splits / f"{k}.parquet", index=False, row_group_size=ROW_GROUP)
    meta = steps.preprocess_splits(schema, cfg, splits, tmp_path / "processed")

    info = json.loads((splits / "info.json").read_text())
    ref = preprocess(schema, {k: pd.read_parquet(splits / f"{k}.parquet") for k in SPLITS}, cfg.preprocess, info)
    (tmp_path / "reference").mkdir()
    for k in SPLITS:
        ref.frames[k].to_parquet(tmp_path / "reference" / f"{k}.parquet", index=False, row_group_size=ROW_GROUP,
                                 **options(ref.frames[k]))
    _same_files(tmp_path / "processed", tmp_path / "reference", [f"{k}.parquet" for k in SPLITS])
    assert {k: v for k, v in meta.items() if k != "inputs"} == ref.meta
    assert len(pd.read_parquet(tmp_path / "processed" / "train.parquet")) > ROW_GROUP
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch columns left behind"



def test_preprocess_on_worker_processes_writes_the_in_process_files(tmp_path: Path) -> None:
    """The columns fitted and transformed on worker processes (started from a fork server) give the files
    and meta.json of the stage's own process, numerical and categorical columns alike."""
    schema = get_schema("aliexpress")
    cfg = _config("aliexpress", {"train": 3000, "test": 1200})
    steps.acquire(schema, cfg, tmp_path / "raw", tmp_path / "cache")
    steps.split(schema, cfg, tmp_path / "raw", tmp_path / "splits")
    info = json.loads((tmp_path / "splits" / "info.json").read_text())
    for n in (1, 2):
        (tmp_path / f"processed{n}").mkdir()
    metas = [
        preprocess_columns.preprocess_files(
            schema, tmp_path / "splits", tmp_path / f"processed{n}", cfg.preprocess, info, n_workers=n
        )
        for n in (1, 2)
    ]
    _same_files(tmp_path / "processed1", tmp_path / "processed2", [f"{k}.parquet" for k in SPLITS])
    assert metas[0] == metas[1]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "scratch columns left behind"


def test_split_reads_raw_row_groups_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Raw files of several row groups are made canonical a row group at a time (no raw column is read whole:
    a level-coded column's codes take a rows x levels matrix): the same split files as the whole-frame path,
    and a bad level in a later row group is reported at its row of the file."""
    schema, cfg = get_schema("higgs"), _config("higgs", {"data": 3000})
    steps.acquire(schema, cfg, tmp_path / "raw", tmp_path / "cache")
    raw = tmp_path / "raw" / "data.parquet"
    frame = pd.read_parquet(raw)
    frame.to_parquet(raw, index=False, row_group_size=400)
    assert columnar.pq.ParquetFile(raw).metadata.num_row_groups == 8
    whole = columnar.ParquetColumns.series

    def series(self: columnar.ParquetColumns, name: str) -> pd.Series:
        assert self.path != raw, f"raw column {name} read whole"
        return whole(self, name)

    with monkeypatch.context() as m:
        m.setattr(columnar.ParquetColumns, "series", series)
        steps.split(schema, cfg, tmp_path / "raw", tmp_path / "splits")
    _reference_split("higgs", cfg, tmp_path / "raw", tmp_path / "reference")
    _same_files(tmp_path / "splits", tmp_path / "reference", [f"{k}.parquet" for k in SPLITS])

    frame.loc[1700, "jet2_btag"] = 0.5  # none of the levels, in the fifth row group
    frame.to_parquet(raw, index=False, row_group_size=400)
    with pytest.raises(SplitError, match=r"column 'jet2_btag', row 1701: value 0.5 is none of the column's levels"):
        steps.split(schema, cfg, tmp_path / "raw", tmp_path / "splits2")


@pytest.mark.parametrize(("y", "n_test"), [
    (np.r_[np.zeros(900, np.int64), np.ones(101, np.int64)], 150),  # imbalanced, odd sizes
    (np.random.default_rng(1).integers(0, 7, 2000), 333),  # classes whose shares tie
    (np.array(["0_1", "1_0", "1_1", "0_0"] * 250, dtype=object), 100),  # a label combination, as text
])
def test_stratified_split_draws_scikit_learns_rows(y: np.ndarray, n_test: int) -> None:
    from sklearn.model_selection import train_test_split

    from multitab.datasets.split import stratified_shuffle_split

    want = train_test_split(np.arange(len(y)), test_size=n_test, stratify=y, random_state=42)
    got = stratified_shuffle_split(y, n_test, 42)
    assert got is not None
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    solo = np.array(["9_9"], dtype=object) if y.dtype == object else np.array([99])
    assert stratified_shuffle_split(np.concatenate([y, solo]), n_test, 42) is None  # a class of one row
