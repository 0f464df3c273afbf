"""Data validation: a valid split passes; each corruption of the catalogue fails with its own
check, names split and column, and leaves no verdict. One GX context and report folder per session."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import validation_frames as vf  # tests/ is on sys.path (pytest's default import mode)
from multitab.config import load_params
from multitab.config.validation import ReportConfig
from multitab.datasets.schema import get_schema
from multitab.runtime.exit_codes import BAD_INPUT
from multitab.validation import expected_rows
from stages import validate_processed, validate_raw

REPO = Path(__file__).resolve().parents[1]
Frames = dict[str, pd.DataFrame]


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("validation")
    params = vf.write_params(root / "params.yaml", REPO / "params.yaml")
    return {"root": root, "params": params, "gx": root / "gx", "report": root / "reports", "n": 0}


def _case(env: dict) -> Path:
    env["n"] += 1
    return env["root"] / f"case{env['n']}"


def run_raw(
    env: dict,
    capsys: pytest.CaptureFixture,
    dataset: str,
    corrupt: Callable[[Frames], None] | None = None,
    *extra: str,
) -> tuple[int, str, Path]:
    """Write valid splits, corrupt them, run the stage; (exit status, printed summary, verdict path)."""
    case = _case(env)
    frames = vf.write_splits(case / "splits", dataset, env["params"])
    if corrupt is not None:
        corrupt(frames)
        for split, f in frames.items():
            f.to_parquet(case / "splits" / f"{split}.parquet", index=False)
    out = case / "validated" / f"{dataset}.raw.json"
    rc = validate_raw.main(
        [
            "--dataset",
            dataset,
            "--splits",
            str(case / "splits"),
            "--out",
            str(out),
            "--context",
            str(env["gx"]),
            "--report",
            str(env["report"]),
            "--params",
            str(env["root"] / "params.yaml"),
            *extra,
        ]
    )
    captured = capsys.readouterr()
    return rc, captured.out + captured.err, out


def run_processed(
    env: dict,
    capsys: pytest.CaptureFixture,
    dataset: str,
    corrupt: Callable[[Frames, dict], None] | None = None,
) -> tuple[int, str, Path]:
    case = _case(env)
    frames, meta = vf.processed_frames(dataset, env["params"])
    if corrupt is not None:
        corrupt(frames, meta)
    vf.write_processed(case / "processed", frames, meta)
    out = case / "validated" / f"{dataset}.json"
    rc = validate_processed.main(
        [
            "--processed",
            str(case / "processed"),
            "--out",
            str(out),
            "--context",
            str(env["gx"]),
            "--report",
            str(env["report"]),
            "--params",
            str(env["root"] / "params.yaml"),
        ]
    )
    captured = capsys.readouterr()
    return rc, captured.out + captured.err, out


def failed(text: str, split: str, column: str | None, check: str) -> list[str]:
    """Summary lines of failed expectations with this split, column and check id."""
    where = f"column '{column}'" if column else "table"
    return [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip().startswith(f"[{split}] {where} ·") and f"({check})" in ln
    ]


def assert_fails(result: tuple[int, str, Path], split: str, column: str | None, check: str) -> str:
    rc, text, out = result
    assert rc == BAD_INPUT, text
    assert not out.exists(), "a failing validation must not write a verdict"
    lines = failed(text, split, column, check)
    assert lines, f"expected a failed '{check}' on [{split}] {column}; got:\n{text}"
    return lines[0]


# ------------------------------------------------------------------------------------------------ passes
@pytest.mark.parametrize("dataset", ["acs_income", "higgs"])
def test_valid_raw_splits_pass(env: dict, capsys: pytest.CaptureFixture, dataset: str) -> None:
    rc, text, out = run_raw(env, capsys, dataset)
    assert rc == 0, text
    verdict = json.loads(out.read_text())
    assert verdict["success"] and verdict["dataset"] == dataset and verdict["stage"] == "validate_raw"
    assert set(verdict["splits"]) == {"train", "val", "test"} and verdict["inputs"].keys() >= {
        "train.parquet"
    }


@pytest.mark.slow
def test_valid_aliexpress_raw_passes(env: dict, capsys: pytest.CaptureFixture) -> None:
    rc, text, _ = run_raw(env, capsys, "aliexpress")
    assert rc == 0, text


@pytest.mark.parametrize("dataset", ["acs_income", "higgs"])
def test_valid_processed_splits_pass(env: dict, capsys: pytest.CaptureFixture, dataset: str) -> None:
    rc, text, out = run_processed(env, capsys, dataset)
    assert rc == 0, text
    assert json.loads(out.read_text())["success"]


# ------------------------------------------------------------------------------------------------ catalogue
def test_missing_column(env: dict, capsys: pytest.CaptureFixture) -> None:
    line = assert_fails(
        run_raw(env, capsys, "acs_income", lambda f: f["train"].pop("SCHL")), "train", None, "columns"
    )
    assert "missing ['SCHL']" in line


def test_extra_column(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["val"]["row_id"] = np.arange(len(f["val"]))

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "val", None, "columns")
    assert "unexpected ['row_id']" in line


def test_renamed_column(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["test"] = f["test"].rename(columns={"AGEP": "age"})

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", None, "columns")
    assert "missing ['AGEP']" in line and "unexpected ['age']" in line


def test_wrong_dtype(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"]["SEX"] = f["train"]["SEX"].astype("float64")

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "train", "SEX", "dtype")
    assert "'float64'" in line and "expected int64" in line


def test_nan_in_feature(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"].loc[[3, 7], "lepton_pT"] = np.nan

    line = assert_fails(run_raw(env, capsys, "higgs", corrupt), "train", "lepton_pT", "not_null")
    assert "2 of" in line and "offending rows: 3 (lepton_pT=nan), 7 (lepton_pT=nan)" in line


def test_nan_in_label(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["val"]["income"] = f["val"]["income"].astype("float64")
        f["val"].loc[2, "income"] = np.nan

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "val", "income", "not_null")
    assert "offending rows: 2 (income=nan)" in line


def test_binary_label_outside_0_1(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"].loc[5, "income"] = 2

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "train", "income", "labels")
    assert "offending rows: 5 (income=2)" in line


def test_marital_outside_its_5_classes(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["test"].loc[4, "marital"] = 5

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", "marital", "labels")
    assert "offending rows: 4 (marital=5)" in line


def test_infinite_regression_target(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["test"].loc[1, "m_jj"] = np.inf

    rc, text, out = result = run_raw(env, capsys, "higgs", corrupt)
    line = assert_fails(result, "test", "m_jj", "finite")
    assert "offending rows: 1 (m_jj=inf)" in line
    assert "standard deviation undefined" in failed(text, "test", "m_jj", "constant")[0]


def test_constant_numerical_column(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"]["lepton_eta"] = np.float32(0.5)

    line = assert_fails(run_raw(env, capsys, "higgs", corrupt), "train", "lepton_eta", "constant")
    assert "observed 0" in line


def test_numerical_value_out_of_plausible_range(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["val"].loc[9, "lepton_phi"] = np.float32(40.0)

    line = assert_fails(run_raw(env, capsys, "higgs", corrupt), "val", "lepton_phi", "range")
    assert "offending rows: 9 (lepton_phi=40)" in line


def test_split_with_zero_rows(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["val"] = f["val"].iloc[:0]

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "val", None, "rows")
    assert "observed 0" in line


def test_row_count_differs_from_params(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"] = pd.concat([f["train"], f["train"].iloc[:100]], ignore_index=True)

    assert_fails(run_raw(env, capsys, "acs_income", corrupt), "train", None, "rows")


def test_inverted_class_balance(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"]["income"] = 1 - f["train"]["income"]

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "train", "income", "class_balance")
    assert "Table 1: 0.3944" in line


def test_duplicated_header_row(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        header = pd.DataFrame([list(f["train"].columns)], columns=f["train"].columns)
        # What reading a CSV whose header row was duplicated leaves: every column text.
        f["train"] = pd.concat([header, f["train"].astype(str)], ignore_index=True).astype(str)

    rc, text, out = result = run_raw(env, capsys, "acs_income", corrupt)
    line = assert_fails(result, "train", "AGEP", "dtype")
    assert "offending rows: 0 (AGEP='AGEP')" in line
    # The printed summary stops at report.max_failures; the Data Docs record lists every failure.
    record = json.loads((env["report"] / "results" / "validate_raw-acs_income-train.json").read_text())
    every = "\n".join(record["failures"])
    assert all(failed(every, "train", c, "dtype") for c in get_schema("acs_income").canonical_columns)


def test_unseen_category_above_tolerated_fraction(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        unseen = int(np.setdiff1d(np.arange(10, 9921), f["train"]["OCCP"].unique())[0])
        f["test"].loc[: len(f["test"]) // 20, "OCCP"] = unseen  # ~5% of rows > the tolerated 1%

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", "OCCP", "unseen")
    assert "tolerated 2.88%" in line  # 1 % of its 450 rows, and 4 standard deviations of sampling


def test_unseen_category_below_tolerated_fraction_passes(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        unseen = int(np.setdiff1d(np.arange(10, 9921), f["train"]["OCCP"].unique())[0])
        f["test"].loc[:1, "OCCP"] = unseen  # 2 of 450 rows

    rc, text, out = run_raw(env, capsys, "acs_income", corrupt)
    assert rc == 0 and out.exists(), text


def test_train_and_test_with_different_columns(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        cols = list(f["test"].columns)
        cols[0], cols[1] = cols[1], cols[0]
        f["test"] = f["test"][cols]

    line = assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", None, "same_columns_as_train")
    assert "order differs from position 0" in line


# ------------------------------------------------------------------------------------------------ processed
def test_processed_infinite_feature(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames, meta: dict) -> None:
        f["val"].loc[6, "jet1_eta"] = -np.inf

    line = assert_fails(run_processed(env, capsys, "higgs", corrupt), "val", "jet1_eta", "finite")
    assert "offending rows: 6 (jet1_eta=-inf)" in line


def test_processed_category_code_beyond_cardinality(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames, meta: dict) -> None:
        f["test"].loc[8, "SEX"] = 3  # cardinality 2 + the reserved index 0: codes 0..2

    line = assert_fails(run_processed(env, capsys, "acs_income", corrupt), "test", "SEX", "codes")
    assert "offending rows: 8 (SEX=3)" in line


def test_processed_train_not_standard_normal(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames, meta: dict) -> None:
        f["train"]["lepton_pT"] = f["train"]["lepton_pT"] * 5 + 3  # forgot the quantile transform

    rc, text, out = result = run_processed(env, capsys, "higgs", corrupt)
    assert_fails(result, "train", "lepton_pT", "normal_std")
    assert failed(text, "train", "lepton_pT", "normal_mean")


def test_processed_splits_with_different_columns(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames, meta: dict) -> None:
        f["test"] = f["test"].drop(columns=["m_bb"])

    assert_fails(run_processed(env, capsys, "higgs", corrupt), "test", None, "same_columns_as_train")


def test_processed_row_count_differs_from_meta(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames, meta: dict) -> None:
        meta["n_rows"]["val"] += 1

    assert_fails(run_processed(env, capsys, "acs_income", corrupt), "val", None, "rows")


# ------------------------------------------------------------------------------------------------ behaviour
def test_warn_only_writes_a_failing_verdict_and_exits_0(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["train"].loc[5, "income"] = 2

    rc, text, out = run_raw(env, capsys, "acs_income", corrupt, "--warn-only")
    assert rc == 0 and failed(text, "train", "income", "labels")
    verdict = json.loads(out.read_text())
    assert verdict["success"] is False and verdict["warn_only"] is True and verdict["failures"]


def test_failure_leaves_an_earlier_verdict_untouched(env: dict, capsys: pytest.CaptureFixture) -> None:
    rc, text, out = run_raw(env, capsys, "acs_income")
    assert rc == 0
    before = out.read_bytes()
    case = out.parent.parent
    f = pd.read_parquet(case / "splits" / "val.parquet")
    f.loc[0, "marital"] = 11
    f.to_parquet(case / "splits" / "val.parquet", index=False)
    rc = validate_raw.main(
        [
            "--dataset",
            "acs_income",
            "--splits",
            str(case / "splits"),
            "--out",
            str(out),
            "--context",
            str(env["gx"]),
            "--report",
            str(env["report"]),
            "--params",
            str(env["root"] / "params.yaml"),
        ]
    )
    assert rc == BAD_INPUT and out.read_bytes() == before


def test_data_docs_index_shows_failed_expectations(env: dict, capsys: pytest.CaptureFixture) -> None:
    def corrupt(f: Frames) -> None:
        f["test"].loc[4, "marital"] = 5

    assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", "marital", "labels")
    index = (env["report"] / "index.html").read_text()
    assert "<script" not in index  # opens offline, in any browser
    assert "validate_raw@acs_income" in index and "FAILED" in index
    assert "column &#x27;marital&#x27; · expect_column_values_to_be_in_set (labels)" in index
    record = json.loads((env["report"] / "results" / "validate_raw-acs_income-test.json").read_text())
    page = env["report"] / record["page"]
    assert (
        page.exists()
        and "expect_column_values_to_be_in_set" in page.read_text()
        or "marital" in page.read_text()
    )


def test_data_docs_pages_load_nothing_from_the_network(env: dict, capsys: pytest.CaptureFixture) -> None:
    """Every generated page (the project's index, GX's index, result and suite pages) references no
    off-site URL in src=, href= or url(...), and every local reference resolves to a file of the site."""
    import re

    from multitab.validation import assets

    assert not assets.missing(), (
        f"Data Docs assets not fetched into {assets.cache_dir()}: run `python -m multitab.validation.assets` "
        "(make does it before test and repro)"
    )

    def corrupt(f: Frames) -> None:
        f["test"].loc[4, "marital"] = 5

    assert_fails(run_raw(env, capsys, "acs_income", corrupt), "test", "marital", "labels")
    pages = sorted(env["report"].rglob("*.html"))
    record = json.loads((env["report"] / "results" / "validate_raw-acs_income-test.json").read_text())
    # the suite's page and its results' pages: this run's and those kept of earlier runs
    gx_pages = [p for p in pages if "validate_raw-acs_income-test" in p.as_posix()]
    assert (env["report"] / "gx" / "index.html") in pages and env["report"] / record["page"] in gx_pages, pages
    assert env["report"] / "gx" / "expectations" / "validate_raw-acs_income-test.html" in gx_pages
    assert 2 <= len(gx_pages) <= 1 + ReportConfig.keep_runs, gx_pages
    # every CDN URL of the manifest but one: the index loads filter-control's .min.css, other pages its .css
    n_cdn = len(assets.load_manifest().urls) - 1
    for page in pages:
        text = page.read_text()
        assert not assets.external_references(text), f"{page}: {assets.external_references(text)}"
        refs = [r for r in assets.REFERENCE.findall(text) if r and not r.startswith(("#", "data:", "{"))]
        for ref in refs:
            assert (page.parent / ref.split("#")[0]).is_file(), f"{page}: {ref} points to nothing"
        if page.is_relative_to(env["report"] / "gx"):  # each of GX's CDN files, now from the site
            assert sum("static/vendor/" in r for r in refs) == n_cdn, (page, refs)
    # the status icons and the "Failed only" filter need Font Awesome's fonts and jQuery next to the pages
    vendor = env["report"] / "gx" / assets.VENDOR
    assert (vendor / "@fortawesome/fontawesome-free@6.6.0/webfonts/fa-solid-900.woff2").is_file()
    index = (env["report"] / "gx" / "index.html").read_text()
    assert re.search(r'<script src="static/vendor/jquery@3\.7\.1/dist/jquery\.min\.js">', index)


def test_results_carry_their_time_and_older_splits_are_marked_stale(
    env: dict, capsys: pytest.CaptureFixture
) -> None:
    import re

    from multitab.validation.report_page import write_index

    assert run_raw(env, capsys, "acs_income")[0] == 0
    record = json.loads((env["report"] / "results" / "validate_raw-acs_income-val.json").read_text())
    # GX's result page sits under its run name: the run's time, not "__none__"
    assert record["page"] and "__none__" not in record["page"]
    assert re.search(r"/\d{4}-\d\d-\d\dT\d{6}Z/", record["page"]), record["page"]
    # a later run of validate_raw@acs_income that never reached `val`: val's result is stale
    for split in ("train", "test"):
        path = env["report"] / "results" / f"validate_raw-acs_income-{split}.json"
        later = json.loads(path.read_text())
        later["validated_at"] = "2999-01-01T00:00:00+00:00"
        path.write_text(json.dumps(later))
    index = write_index(env["report"]).read_text()
    assert "<th>validated (UTC)</th>" in index and "<td>2999-01-01 00:00:00</td>" in index
    row = r'<tr class="[^"]*"><td>validate_raw@acs_income</td><td>(\w+)</td>.*?</tr>'
    rows = {m.group(1): m.group(0) for m in re.finditer(row, index)}
    assert "passed (stale)" in rows["val"] and "stale" not in rows["train"] and "stale" not in rows["test"]
    # the project's page needs nothing from the network
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", index), "external URL in index.html"


def test_missing_split_file_is_a_clear_error(env: dict, capsys: pytest.CaptureFixture) -> None:
    case = _case(env)
    vf.write_splits(case / "splits", "acs_income", env["params"])
    (case / "splits" / "val.parquet").unlink()
    rc = validate_raw.main([
        "--dataset", "acs_income", "--splits", str(case / "splits"), "--out", str(case / "v.json"),
        "--context", str(env["gx"]), "--report", str(env["report"]), "--params", str(env["root"] / "params.yaml"),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == BAD_INPUT and not (case / "v.json").exists()
    assert "[validate_raw@acs_income] error:" in err and "val.parquet not found" in err


def test_expected_rows_exact_for_remote() -> None:
    data = load_params(REPO / "params.yaml").dataset("higgs")
    data = type(data)(**{**data.__dict__, "source": "remote"})
    rows = expected_rows(get_schema("higgs"), data, 0, {"train": 0, "val": 0, "test": 0})
    assert rows == {"train": (9_900_000, 9_900_000), "val": (550_000, 550_000), "test": (550_000, 550_000)}
    ali = load_params(REPO / "params.yaml").dataset("aliexpress")
    ali = type(ali)(**{**ali.__dict__, "source": "remote"})
    rows = expected_rows(get_schema("aliexpress"), ali, 2, {"train": 0, "val": 0, "test": 0})
    assert rows["test"] == (5_559_299, 5_559_303)
    assert math.isclose(sum((lo + hi) / 2 for lo, hi in (rows["train"], rows["val"])), 12_157_894, abs_tol=1)


def test_fast_decimal_check_answers_as_great_expectations() -> None:
    import decimal

    import great_expectations.util as gx_util

    from multitab.validation.runner import _contains_decimal

    assert gx_util.does_ndarray_contain_decimal_dtype is _contains_decimal  # installed by the runner
    assert not _contains_decimal(np.arange(5, dtype=np.float32))
    assert _contains_decimal(np.array([1.0, decimal.Decimal("2.5")], dtype=object))
    assert not _contains_decimal(np.array([1.0, "a"], dtype=object))


# ------------------------------------------------------------------------------------------------
# Duplicates, overlap, target range, rare tasks, the warn policy


def test_duplicated_rows_fail(env: dict, capsys: pytest.CaptureFixture) -> None:
    def dup(frames: Frames) -> None:  # the file concatenated with itself
        frames["train"] = pd.concat([frames["train"], frames["train"]], ignore_index=True)

    rc, text, out = run_raw(env, capsys, "higgs", dup)
    assert rc == BAD_INPUT and not out.exists()
    (line,) = failed(text, "train", None, "duplicates")
    assert "repeat an earlier row" in line


@pytest.mark.parametrize("dataset", ["higgs", "aliexpress"])
def test_val_rows_also_in_train_fail(env: dict, capsys: pytest.CaptureFixture, dataset: str) -> None:
    def leak(frames: Frames) -> None:
        n = len(frames["val"]) // 20  # 5 %: physics events and search logs do not repeat
        frames["val"].iloc[:n] = frames["train"].iloc[:n].to_numpy()

    rc, text, _ = run_raw(env, capsys, dataset, leak)
    assert rc == BAD_INPUT
    (line,) = failed(text, "val", None, "overlap")
    assert "identical to a train row" in line


def test_survey_records_repeat_by_nature(env: dict, capsys: pytest.CaptureFixture) -> None:
    """ACS (census microdata) holds different people with identical answers: repeats at a natural rate pass,
    a file concatenated with itself (50 %) does not."""
    assert get_schema("acs_income").records_repeat and not get_schema("higgs").records_repeat

    def people(frames: Frames) -> None:  # 8 % of train repeat earlier people, 10 % of val equal a train row
        train, val = frames["train"], frames["val"]
        n = len(train) // 12
        train.iloc[-n:] = train.iloc[:n].to_numpy()
        m = len(val) // 10
        val.iloc[:m] = train.iloc[:m].to_numpy()

    rc, text, out = run_raw(env, capsys, "acs_income", people)
    assert rc == 0 and out.exists(), text
    assert not [w for w in json.loads(out.read_text())["warnings"] if "duplicates" in w or "overlap" in w]

    def copied(frames: Frames) -> None:
        frames["train"] = pd.concat([frames["train"], frames["train"]], ignore_index=True)

    rc, text, out = run_raw(env, capsys, "acs_income", copied)
    assert rc == BAD_INPUT and not out.exists()
    (line,) = failed(text, "train", None, "duplicates")
    assert "tolerated 30%" in line and "repeat by nature (survey microdata), but not this often" in line


def test_unseen_ids_are_judged_against_the_rate_train_predicts(
    env: dict, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """AliExpress' id columns: ids unseen in train are normal (index 0 takes them). Beyond the rate train
    predicts they are a warning (policy unseen_ids: warn), an error only where the policy says so; a
    long-tailed train column (many ids seen once) predicts many unseen ids and tolerates them."""
    import yaml

    def new_ids(frames: Frames) -> None:  # 10 % of test rows hold an id train never had
        for f in frames.values():  # (a positive of the 0.07 % task in every split of a few hundred rows)
            f.loc[len(f) - 1, "conversion"] = 1
        test = frames["test"]
        test.loc[: len(test) // 10 - 1, "categorical_3"] = int(frames["train"]["categorical_3"].max()) + 1000

    rc, text, out = run_raw(env, capsys, "aliexpress", new_ids)
    assert rc == 0 and out.exists(), text
    warnings = json.loads(out.read_text())["warnings"]
    assert any("categorical_3" in w and "(unseen_id)" in w for w in warnings), warnings
    assert any("categorical_3" in w and "(code_range)" in w for w in warnings), warnings

    params = yaml.safe_load((env["root"] / "params.yaml").read_text())
    params["validation"]["policy"]["aliexpress"]["unseen_ids"] = "error"
    strict = tmp_path / "params.yaml"
    strict.write_text(yaml.safe_dump(params, sort_keys=False))
    assert_fails(run_raw(env, capsys, "aliexpress", new_ids, "--params", str(strict)), "test", "categorical_3",
                 "unseen_id")

    def long_tail(frames: Frames) -> None:  # a third of train's ids occur once: ~2/3 of new rows may be new
        new_ids(frames)
        train = frames["train"]
        k = len(train) // 3
        train.loc[: k - 1, "categorical_3"] = np.arange(10_000, 10_000 + k)

    rc, text, out = run_raw(env, capsys, "aliexpress", long_tail, "--params", str(strict))
    assert rc == 0, text
    warnings = json.loads(out.read_text())["warnings"]
    assert not [w for w in warnings if "categorical_3" in w and ("(unseen_id)" in w or "(code_range)" in w)]


def test_class_absent_from_every_split_fails(env: dict, capsys: pytest.CaptureFixture) -> None:
    def drop(frames: Frames) -> None:  # marital class 3 nowhere (its rows relabelled 0)
        for f in frames.values():
            f.loc[f["marital"] == 3, "marital"] = 0

    rc, text, out = run_raw(env, capsys, "acs_income", drop)
    assert rc == BAD_INPUT and not out.exists()
    (line,) = failed(text, "train", "marital", "class_absent")
    assert "[3]" in line and "occur in no split" in line


def test_scaled_regression_target_fails(env: dict, capsys: pytest.CaptureFixture) -> None:
    def scale(frames: Frames) -> None:  # 20 rows in other units (x 10,000)
        frames["train"].loc[:19, "m_jj"] = frames["train"].loc[:19, "m_jj"] * 10_000

    rc, text, _ = run_raw(env, capsys, "higgs", scale)
    assert rc == BAD_INPUT
    (line,) = failed(text, "train", "m_jj", "target_range")
    assert "20 of" in line


def test_rare_task_all_zero_fails(env: dict, capsys: pytest.CaptureFixture) -> None:
    def zero(frames: Frames) -> None:
        for f in frames.values():
            f["conversion"] = 0

    rc, text, _ = run_raw(env, capsys, "aliexpress", zero)
    assert rc == BAD_INPUT
    for split in ("train", "val", "test"):
        assert failed(text, split, "conversion", "positives"), text
    # (class balance: on these few thousand rows sampling noise allows 0 %; on real sizes it fails too,
    # see test_rare_class_balance_tolerance_is_relative)


def test_rare_class_balance_tolerance_is_relative() -> None:
    from multitab.validation.suites import _class_balance

    cfg = load_params(REPO / "params.yaml").validation.raw
    conv = get_schema("aliexpress").task("conversion")
    (exp,) = _class_balance(conv, 1_000_000, cfg)
    assert exp.min_value > 0.0 and exp.max_value < 0.002  # around 0.07 %, not 0.07 % +- 2 %
    click = get_schema("aliexpress").task("click")
    (exp,) = _class_balance(click, 1_000_000, cfg)
    assert exp.min_value > 0.0 and exp.max_value < 0.04


def test_warn_policy_passes_and_records_warnings(
    env: dict, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    import yaml

    params = yaml.safe_load((env["root"] / "params.yaml").read_text())
    params["validation"]["policy"]["acs_income"]["class_balance"] = "warn"
    warn_params = tmp_path / "params.yaml"
    warn_params.write_text(yaml.safe_dump(params, sort_keys=False))

    def shift(frames: Frames) -> None:  # a one-state extract: class shares far from Table 1
        for f in frames.values():
            f["marital"] = 0

    rc, text, out = run_raw(env, capsys, "acs_income", shift)
    assert rc == BAD_INPUT and not out.exists()  # policy error (the default)
    rc, text, out = run_raw(env, capsys, "acs_income", shift, "--params", str(warn_params))
    assert rc == 0, text
    verdict = json.loads(out.read_text())
    assert verdict["success"] is True and verdict["policy"]["class_balance"] == "warn"
    assert any("(class_balance)" in w and "marital" in w for w in verdict["warnings"])
    assert "warning: [train] column 'marital'" in text
    index = (env["report"] / "index.html").read_text()
    assert "passed with" in index and "warning(s)" in index
