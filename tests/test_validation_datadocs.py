"""Data Docs tell the truth: the project's page and Great Expectations' pages count the same expectations
(the project's own checks are GX expectations too), each result names its dataset and split as its data
asset, and the results of the newest runs of every suite are kept."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import validation_frames as vf  # tests/ is on sys.path (pytest's default import mode)
from multitab.config import load_params
from multitab.datasets.schema import get_schema
from multitab.validation import Outcome, validate_processed, validate_raw

REPO = Path(__file__).resolve().parents[1]
Frames = dict[str, pd.DataFrame]
OWN_TYPES = {
    "expect_table_rows_to_be_unique",
    "expect_table_rows_to_not_be_in_train",
    "expect_column_values_to_be_within_train_bounds",
}


def _raw(root: Path, dataset: str, corrupt: Callable[[Frames], None] | None = None) -> Outcome:
    """validate_raw on valid stand-in splits (corrupted by `corrupt`), context root/gx, report root/reports."""
    params = vf.write_params(root / "params.yaml", REPO / "params.yaml")
    frames = vf.write_splits(root / "splits", dataset, params)
    if corrupt is not None:
        corrupt(frames)
        for split, f in frames.items():
            f.to_parquet(root / "splits" / f"{split}.parquet", index=False)
    p = load_params(root / "params.yaml")
    return validate_raw(
        root / "splits", get_schema(dataset), p.dataset(dataset), p.validation,
        context_dir=root / "gx", report_dir=root / "reports",
    )  # fmt: skip


def _processed(root: Path, dataset: str, keep_runs: int) -> Outcome:
    params = vf.write_params(root / "params.yaml", REPO / "params.yaml")
    frames, meta = vf.processed_frames(dataset, params)
    vf.write_processed(root / "processed", frames, meta)
    return validate_processed(
        root / "processed", load_params(root / "params.yaml").validation,
        context_dir=root / "gx", report_dir=root / "reports", keep_runs=keep_runs,
    )  # fmt: skip


def _record(root: Path, name: str) -> dict:
    return json.loads((root / "reports" / "results" / f"{name}.json").read_text())


def _stored(root: Path, name: str) -> list[Path]:
    """The validation results GX keeps of suite `name` (the JSON its Data Docs render), oldest first."""
    return sorted((root / "gx" / "uncommitted" / "validations" / name).glob("*/*/*.json"))


def _text(page: Path) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text()))


def test_project_page_and_data_docs_count_the_same_expectations(tmp_path: Path) -> None:
    def duplicated(frames: Frames) -> None:  # fails an own check (duplicates) and a GX one (rows)
        frames["train"] = pd.concat([frames["train"], frames["train"]], ignore_index=True)

    outcome = _raw(tmp_path, "higgs", duplicated)
    assert not outcome.success
    index = (tmp_path / "reports" / "index.html").read_text()
    for split, result in outcome.splits.items():
        name = f"validate_raw-higgs-{split}"
        record = _record(tmp_path, name)
        (stored,) = _stored(tmp_path, name)
        gx_result = json.loads(stored.read_text())
        n = record["expectations"]
        assert n == result.n_expectations == gx_result["statistics"]["evaluated_expectations"]
        assert len(gx_result["results"]) == n
        own = OWN_TYPES - {"expect_table_rows_to_not_be_in_train"} if split == "train" else OWN_TYPES
        assert own <= {r["expectation_config"]["type"] for r in gx_result["results"]}
        # every failed check of the project page is a failed expectation on GX's page, and the reverse
        failed = [r for r in gx_result["results"] if not r["success"]]
        assert len(failed) == len(result.failures) == gx_result["statistics"]["unsuccessful_expectations"]
        assert {r["expectation_config"]["meta"]["check"] for r in failed} == {f.check for f in result.failures}
        # the numbers as the pages show them: GX's result page, and the row of the project's page
        page = _text(tmp_path / "reports" / record["page"])
        assert re.search(rf"Evaluated Expectations {n} Successful Expectations {n - len(failed)} ", page), page
        row = re.search(
            rf'<td>validate_raw@higgs</td><td>{split}</td><td class="status">[^<]*</td><td>[^<]*</td>'
            r"<td>\d+</td><td>(\d+)</td>",
            index,
        )
        assert row and int(row.group(1)) == n
        # the suite holds them too: its page lists what the result evaluated
        suite = json.loads((tmp_path / "gx" / "expectations" / f"{name}.json").read_text())
        assert len(suite["expectations"]) == n
        assert {e["id"] for e in suite["expectations"]} == {r["expectation_config"]["id"] for r in gx_result["results"]}
    failed_train = {f.check for f in outcome.splits["train"].failures}
    assert {"duplicates", "rows"} <= failed_train


def test_results_name_their_dataset_and_split(tmp_path: Path) -> None:
    """The data asset of each result is `<dataset>.<split>`, on GX's pages too; the asset exists only while its
    split is validated (one a killed run left is removed), so the committed great_expectations.yml is the same
    after a run."""
    import great_expectations as gx

    # the committed context only: a checkout that ran `make repro` keeps its own results under gx/uncommitted
    shutil.copytree(REPO / "gx", tmp_path / "gx",
                    ignore=lambda d, names: ["uncommitted"] if Path(d) == REPO / "gx" else [])
    (tmp_path / "reports").mkdir()
    committed = (REPO / "gx" / "great_expectations.yml").read_text()
    killed = gx.get_context(mode="file", context_root_dir=tmp_path / "gx")
    killed.data_sources.get("multitab").add_dataframe_asset("acs_income.val")
    params = vf.write_params(tmp_path / "params.yaml", REPO / "params.yaml")
    vf.write_splits(tmp_path / "splits", "acs_income", params)
    p = load_params(tmp_path / "params.yaml")
    outcome = validate_raw(
        tmp_path / "splits", get_schema("acs_income"), p.dataset("acs_income"), p.validation,
        context_dir=tmp_path / "gx", report_dir=tmp_path / "reports" / "validation",
    )  # fmt: skip
    assert outcome.success
    report = tmp_path / "reports" / "validation"
    gx_index = (report / "gx" / "index.html").read_text()
    for split in ("train", "val", "test"):
        name = f"validate_raw-acs_income-{split}"
        (stored,) = _stored(tmp_path, name)
        meta = json.loads(stored.read_text())["meta"]
        assert meta["active_batch_definition"]["data_asset_name"] == f"acs_income.{split}"
        assert meta["active_batch_definition"]["datasource_name"] == "multitab"
        assert meta["batch_spec"]["data_asset_name"] == f"acs_income.{split}"
        record = json.loads((report / "results" / f"{name}.json").read_text())
        assert f"Data asset: acs_income.{split} " in _text(report / record["page"])
        assert f"'asset_name': 'acs_income.{split}'" in gx_index
    assert (tmp_path / "gx" / "great_expectations.yml").read_text() == committed


def test_results_of_the_newest_runs_are_kept(tmp_path: Path) -> None:
    keep = 2
    pages = []
    for _ in range(keep + 2):
        assert _processed(tmp_path, "acs_income", keep_runs=keep).success
        pages.append(_record(tmp_path, "validate_processed-acs_income-val")["page"])
    assert len(set(pages)) == keep + 2  # one page per run, named by the run's time
    site = tmp_path / "reports"
    for split in ("train", "val", "test"):
        name = f"validate_processed-acs_income-{split}"
        stored = _stored(tmp_path, name)
        assert len(stored) == keep
        kept_pages = sorted((site / "gx" / "validations" / name).rglob("*.html"))
        assert len(kept_pages) == keep and site / _record(tmp_path, name)["page"] in kept_pages
        # the newest results are kept: the same run times as the pages of the last `keep` runs
        runs = {p.parent.relative_to(stored[0].parents[2]) for p in stored}
        assert runs == {Path(p).parent.relative_to(Path(p).parents[2]) for p in pages[-keep:]}
    assert not (site / pages[0]).exists() and (site / pages[-1]).exists()
    with pytest.raises(ValueError, match="keep_runs=0 must be >= 1"):
        _processed(tmp_path, "acs_income", keep_runs=0)


def test_a_half_written_context_file_is_restored_from_the_last_good_copy(tmp_path: Path, caplog) -> None:
    """GX writes great_expectations.yml while a split is validated (its asset comes and goes): a run killed
    in that write leaves it cut short. The next run restores the last good copy and goes on."""
    assert _processed(tmp_path, "acs_income", keep_runs=2).success
    yml = tmp_path / "gx" / "great_expectations.yml"
    good = yml.read_bytes()
    yml.write_bytes(good[: len(good) // 2] + b"\n  - {broken: [")  # cut short mid-write
    with caplog.at_level("WARNING"):
        assert _processed(tmp_path, "acs_income", keep_runs=2).success
    assert "unreadable" in caplog.text and "restored from" in caplog.text
    assert yml.read_bytes() == good
