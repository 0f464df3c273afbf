"""A split validated a few columns at a time (multitab.validation.columns / batched, for splits larger than
`batch_bytes`) gives what the split validated whole gives: the verdict, the failures and their offending rows,
and the Great Expectations result stored for Data Docs; the row hashes are pandas' own."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import validation_frames as vf  # tests/ is on sys.path (pytest's default import mode)
from multitab.config import load_params
from multitab.datasets.schema import get_schema
from multitab.validation import columns, validate_processed, validate_raw
from multitab.validation.columns import SplitData, row_hashes

REPO = Path(__file__).resolve().parents[1]
Frames = dict[str, pd.DataFrame]


def _stored(gx: Path) -> dict[str, list]:
    """Suite -> its stored result's (expectation type, kwargs, success, result, raised) in result order, its
    statistics, success and the fingerprint of the data."""
    out = {}
    root = gx / "uncommitted" / "validations"
    for path in sorted(root.rglob("*.json")):
        vr = json.loads(path.read_text())
        out[path.relative_to(root).parts[0]] = [
            (r["expectation_config"]["type"], r["expectation_config"]["kwargs"], r["success"], r["result"],
             r["exception_info"].get("raised_exception")) for r in vr["results"]
        ] + [vr["statistics"], vr["success"], vr["meta"]["batch_markers"].get("pandas_data_fingerprint")]
    return out


def _both(tmp_path: Path, validate: Callable[..., object]) -> tuple[dict, dict]:
    """The verdict, summary and stored results of `validate(context_dir, report_dir, batch_bytes)` with the
    split held whole and with one column per batch."""
    runs = []
    for label, batch_bytes in (("whole", 1 << 40), ("batched", 64_000)):  # batched: ~3 columns at a time
        gx, report = tmp_path / label / "gx", tmp_path / "report"
        outcome = validate(context_dir=gx, report_dir=report, batch_bytes=batch_bytes, whole_bytes=batch_bytes)
        runs.append({"verdict": outcome.verdict(), "summary": outcome.summary(), "stored": _stored(gx)})  # type: ignore[attr-defined]
    return runs[0], runs[1]


def _corrupt_raw(frames: Frames) -> None:
    frames["train"].loc[[3, 700], "lepton_pT"] = np.nan  # not_null, with its offending rows
    frames["val"].loc[5, "jet1_eta"] = 40.0  # out of the plausible range
    frames["test"] = frames["test"].drop(columns="m_bb")  # a missing column: GX cannot run its expectations
    frames["val"] = pd.concat([frames["val"], frames["val"].iloc[:20]], ignore_index=True)  # duplicates, rows
    frames["train"]["jet2_btag"] = frames["train"]["jet2_btag"].astype(str)  # a wrong dtype


def test_raw_splits_by_columns_equal_the_whole(tmp_path: Path) -> None:
    """Failing and passing expectations side by side (most columns pass): one GX run per batch is the cost,
    so one corrupted set of splits stands for the valid one too."""
    params = vf.write_params(tmp_path / "params.yaml", REPO / "params.yaml")
    frames = vf.write_splits(tmp_path / "splits", "higgs", params)
    _corrupt_raw(frames)
    for split, f in frames.items():
        f.to_parquet(tmp_path / "splits" / f"{split}.parquet", index=False)
    cfg = load_params(tmp_path / "params.yaml")
    whole, batched = _both(tmp_path, lambda **kw: validate_raw(
        tmp_path / "splits", get_schema("higgs"), cfg.dataset("higgs"), cfg.validation, **kw))
    assert batched == whole
    assert whole["verdict"]["success"] is False
    text = whole["summary"]
    assert "3 (lepton_pT=nan), 700 (lepton_pT=nan)" in text and "column 'm_bb' is missing" in text
    assert "(duplicates)" in text and "jet1_eta" in text


def test_processed_splits_by_columns_equal_the_whole(tmp_path: Path) -> None:
    params = vf.write_params(tmp_path / "params.yaml", REPO / "params.yaml")
    frames, meta = vf.processed_frames("acs_income", params)
    frames["test"].loc[[2, 9], "OCCP"] = 10_000  # codes beyond the cardinality
    vf.write_processed(tmp_path / "processed", frames, meta)
    cfg = load_params(tmp_path / "params.yaml")
    whole, batched = _both(tmp_path, lambda **kw: validate_processed(tmp_path / "processed", cfg.validation, **kw))
    assert batched == whole and not whole["verdict"]["success"]
    assert "2 (OCCP=10000), 9 (OCCP=10000)" in whole["summary"]


def test_batches_hold_a_few_columns_and_row_hashes_are_pandas(tmp_path: Path) -> None:
    frame = vf.canonical_frame(get_schema("higgs"), 500, 0)
    frame.loc[[1, 2], "m_jj"] = np.nan
    frame.to_parquet(tmp_path / "s.parquet", index=False)
    split = SplitData(tmp_path / "s.parquet", batch_bytes=3 * 500 * 4)
    assert split.frame is None
    np.testing.assert_array_equal(row_hashes(split), pd.util.hash_pandas_object(frame, index=False).to_numpy())

    class _E:  # the one attribute `batches` reads of an expectation
        def __init__(self, column: str | None) -> None:
            self.column = column

    exps = [_E(None), *(_E(c) for c in frame.columns), _E("not_there")]
    batches = list(split.batches(exps))
    table_frame, table = batches[0]
    assert [e.column for e in table] == [None, "not_there"] and list(table_frame.columns) == list(frame.columns)
    assert all(table_frame[c].to_numpy().strides == (0,) for c in frame.columns)  # no memory per row
    assert all(1 <= len(f.columns) <= 3 for f, _ in batches[1:])
    assert [c for f, _ in batches[1:] for c in f.columns] == list(frame.columns)


def test_metrics_of_earlier_batches_are_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GX caches every resolved metric (full-length condition Series) in the datasource's execution engine:
    each batch must start with that cache empty, or memory grows with every batch validated."""
    from multitab.validation import batched

    cached: list[int] = []

    class Spy(batched.Validator):  # type: ignore[misc]
        def __init__(self, *, batch_definition: object, **kw: object) -> None:
            engine = batch_definition.data_asset.datasource.get_execution_engine()  # type: ignore[attr-defined]
            cached.append(len(engine._metric_cache))
            super().__init__(batch_definition=batch_definition, **kw)

    monkeypatch.setattr(batched, "Validator", Spy)
    params = vf.write_params(tmp_path / "params.yaml", REPO / "params.yaml")
    frames, meta = vf.processed_frames("higgs", params)
    vf.write_processed(tmp_path / "processed", frames, meta)
    cfg = load_params(tmp_path / "params.yaml")
    outcome = validate_processed(tmp_path / "processed", cfg.validation, context_dir=tmp_path / "gx",
                                 report_dir=tmp_path / "report", batch_bytes=64_000, whole_bytes=64_000)
    assert outcome.success and len(cached) > 6
    assert cached == [0] * len(cached)


def test_a_split_between_the_batch_and_the_whole_size_is_held_whole(tmp_path: Path) -> None:
    """The stages hold a split whole up to WHOLE_BYTES (GX's fixed cost is paid once) and batch only larger
    ones; a SplitData without `whole_bytes` holds whole only what fits one batch."""
    frame = vf.canonical_frame(get_schema("higgs"), 500, 0)
    frame.to_parquet(tmp_path / "s.parquet", index=False)
    size = SplitData(tmp_path / "s.parquet").nbytes()
    assert SplitData(tmp_path / "s.parquet", batch_bytes=size // 4).frame is None
    assert SplitData(tmp_path / "s.parquet", batch_bytes=size // 4, whole_bytes=2 * size).frame is not None
    assert columns.WHOLE_BYTES >= 2 * columns.BATCH_BYTES
