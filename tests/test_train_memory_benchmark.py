"""benchmarks/train_memory.py: its processed stand-in folders have preprocess's layout (the reader takes them,
the tensors are the bytes it counts), and one tiny case runs end to end through the train stage."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from _benchmarks import load_benchmark
from multitab.datasets.schema import SCHEMAS
from multitab.training.data import load_processed

tm = load_benchmark("train_memory")


def test_the_stand_in_folders_have_the_processed_layout(tmp_path: Path) -> None:
    sizes = {"train": 2100, "val": 300, "test": 300}
    for dataset in ("aliexpress", "higgs"):
        path = tmp_path / dataset
        tm.write_processed(path, dataset, sizes)
        data = load_processed(path)
        assert {k: len(v) for k, v in data.splits.items()} == sizes
        for split, n in sizes.items():
            assert data.splits[split].nbytes() == tm.tensor_bytes(SCHEMAS[dataset], n)
        schema = pq.read_schema(path / "train.parquet")
        kinds = {f.name: f.kind for f in SCHEMAS[dataset].features}
        assert {str(schema.field(n).type) for n, k in kinds.items() if k == "numerical"} == {"float"}
        assert {str(schema.field(n).type) for n, k in kinds.items() if k == "categorical"} == {"int64"}
        assert data.splits["train"].x_cat.min() >= 1  # code 0: unseen in train
        mtime = (path / "meta.json").stat().st_mtime_ns
        tm.write_processed(path, dataset, sizes)  # the same sizes: kept
        assert (path / "meta.json").stat().st_mtime_ns == mtime
    assert data.meta["n_rows"] == sizes and len(data.splits["train"].float_tasks) == 8


@pytest.mark.slow  # a train stage's process start (imports, inductor's, sklearn's): 10-40 s here
def test_a_tiny_case_runs_through_the_train_stage(tmp_path: Path) -> None:
    out = tmp_path / "record"
    rc = tm.main(["--scale", "0.0005", "--cases", "higgs", "--max-steps", "2", "--threads", "1",
                  "--data", str(tmp_path / "data"), "--out", str(out)])
    record = json.loads(out.with_suffix(".json").read_text())
    case = record["cases"][0]
    assert rc == 0 and case["exit_code"] == 0, case.get("log_tail")
    assert case["rows"] == {"train": 4950, "val": 275, "test": 275} and case["steps_measured"] == 2
    assert 0 < case["seconds_to_first_step"] < case["stage_seconds"] and case["peak_rss_gb"] > 0.1
    assert case["phases_to_first_step"]["load"] >= 0 and "val_seconds" in case and "test_seconds" in case
    assert record["bars"] == {"higgs_peak_within_2x_tensors": None}  # bars are for the full size only
    assert case["epoch_loop_extrapolated"] and case["cpu_seconds_to_first_step"] > 0
    assert "| higgs | 5,500 |" in out.with_suffix(".md").read_text()
