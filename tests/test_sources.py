"""`local` and `remote` sources: strict reading of real-format files, atomic outputs, downloads via a local
HTTP server."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from _http_fixture import FixtureServer, Reply
from multitab.config.data import LocalConfig, RemoteConfig
from multitab.datasets.schema import DatasetSchema, get_schema
from multitab.datasets.sources import SourceError, acquire_local, acquire_remote, read_raw_file

HIGGS = get_schema("higgs")
ACS = get_schema("acs_income")
ALI = get_schema("aliexpress")


def raw_frame(schema: DatasetSchema, n: int, seed: int = 0) -> pd.DataFrame:
    """A valid raw frame: labels inside their classes, integer codes, float features."""
    rng = np.random.default_rng(seed)
    allowed = {"label": [0.0, 1.0], "MAR": [1, 2, 3, 4, 5], "click": [0, 1], "conversion": [0, 1]}
    cols: dict[str, np.ndarray] = {}
    levels = {f.name: f.levels for f in schema.features if f.levels is not None}
    for c in schema.raw_columns:
        if c.name in allowed:
            cols[c.name] = rng.choice(allowed[c.name], n)
        elif c.name in levels:  # Higgs b-tags: the jet's own three levels
            cols[c.name] = rng.choice(np.asarray(levels[c.name], dtype=np.float32), n)
        elif c.dtype == "int":
            cols[c.name] = rng.integers(1, 9, n)
        else:
            cols[c.name] = rng.normal(size=n) * (1e4 if c.name == "PINCP" else 1) + (
                5e4 if c.name == "PINCP" else 0
            )
    return pd.DataFrame(cols)


def write_higgs_gz(path: Path, df: pd.DataFrame, header: bool = False) -> Path:
    with gzip.open(path, "wt") as f:
        df.to_csv(f, header=header, index=False, float_format="%.18e")
    return path


def expect_dtypes(df: pd.DataFrame, schema: DatasetSchema) -> None:
    assert list(df.columns) == [c.name for c in schema.raw_columns]
    for c in schema.raw_columns:
        assert df[c.name].dtype == (np.float32 if c.dtype == "float" else np.int64), c.name


# ------------------------------------------------------------------------------------------------
# Good inputs


def test_higgs_headerless_csv_gz(tmp_path: Path) -> None:
    df = raw_frame(HIGGS, 300)
    got = read_raw_file(write_higgs_gz(tmp_path / "HIGGS.csv.gz", df), HIGGS, "data")
    expect_dtypes(got, HIGGS)
    np.testing.assert_allclose(got.to_numpy(), df.to_numpy(np.float32), rtol=1e-6)


def test_higgs_with_a_header_row_is_read_by_name(tmp_path: Path) -> None:
    df = raw_frame(HIGGS, 50)
    shuffled = df[list(reversed(df.columns))]
    got = read_raw_file(write_higgs_gz(tmp_path / "h.csv.gz", shuffled, header=True), HIGGS, "data")
    expect_dtypes(got, HIGGS)
    np.testing.assert_allclose(got.to_numpy(), df.to_numpy(np.float32), rtol=1e-6)


def test_acs_csv_with_extra_columns_and_float_spelled_ints(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    df = raw_frame(ACS, 200)
    out = df.astype(float).assign(extra=7.0)  # integers written as "3.0", as other tools do
    out.to_csv(tmp_path / "acs.csv", index=False)
    with caplog.at_level(logging.INFO, logger="multitab.datasets.sources"):
        got = read_raw_file(tmp_path / "acs.csv", ACS, "data")
    expect_dtypes(got, ACS)
    assert (got["MAR"].to_numpy() == df["MAR"].to_numpy()).all()
    assert any("extra" in r.getMessage() for r in caplog.records)


def test_acs_parquet_with_string_coded_columns(tmp_path: Path) -> None:
    df = raw_frame(ACS, 100)
    df["COW"] = df["COW"].astype(str).astype("category")  # as a nominal column may come from OpenML
    df.to_parquet(tmp_path / "acs.parquet")
    got = read_raw_file(tmp_path / "acs.parquet", ACS, "data")
    expect_dtypes(got, ACS)
    assert (got["COW"].to_numpy() == df["COW"].astype(int).to_numpy()).all()


def test_acs_arff(tmp_path: Path) -> None:
    df = raw_frame(ACS, 80)
    lines = ["% ACSIncome", "@relation 'ACSIncome'", ""]
    lines += [
        f"@attribute '{c}' numeric" if i % 2 else f"@ATTRIBUTE {c} REAL" for i, c in enumerate(df.columns)
    ]
    lines += ["", "@data"]
    body = df.to_csv(header=False, index=False)
    (tmp_path / "ACSIncome.arff").write_text("\n".join(lines) + "\n" + body)
    got = read_raw_file(tmp_path / "ACSIncome.arff", ACS, "data")
    expect_dtypes(got, ACS)
    assert len(got) == 80 and (got["ST"].to_numpy() == df["ST"].to_numpy()).all()
    # a bad value is reported with its line in the ARFF file
    bad = body.splitlines()
    bad[4] = "x" + bad[4]
    (tmp_path / "bad.arff").write_text("\n".join(lines) + "\n" + "\n".join(bad) + "\n")
    with pytest.raises(SourceError, match=r"column 'AGEP', row 5 \(line 22\)"):
        read_raw_file(tmp_path / "bad.arff", ACS, "data")


def test_aliexpress_folder(tmp_path: Path) -> None:
    src = tmp_path / "AliExpress_NL"
    src.mkdir()
    raw_frame(ALI, 120, seed=1).to_csv(src / "train.csv", index=False)
    raw_frame(ALI, 40, seed=2).to_csv(src / "test.csv", index=False)
    out = tmp_path / "raw"
    info = acquire_local(ALI, LocalConfig(path=str(src)), out)
    assert info["source"] == "local" and info["standin"] is False
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]
    for key, n in [("train", 120), ("test", 40)]:
        got = pd.read_parquet(out / f"{key}.parquet")
        expect_dtypes(got, ALI)
        assert len(got) == n
        assert info["files"][key]["rows"] == n
        assert info["files"][key]["sha256"] == hashlib.sha256((src / f"{key}.csv").read_bytes()).hexdigest()
        assert info["files"][key]["path"] == str(src / f"{key}.csv")


def test_local_single_file_info(tmp_path: Path) -> None:
    f = write_higgs_gz(tmp_path / "HIGGS.csv.gz", raw_frame(HIGGS, 30))
    info = acquire_local(HIGGS, LocalConfig(path=str(f)), tmp_path / "raw")
    assert info["files"]["data"] == {
        "rows": 30,
        "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
        "path": str(f),
    }
    assert [p.name for p in (tmp_path / "raw").iterdir()] == ["data.parquet"]


# ------------------------------------------------------------------------------------------------
# Bad inputs to `local`: a clear error naming file and column, and no output left behind


def _acs_csv(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    df = raw_frame(ACS, 60).astype(object)
    df = edit(df)
    path = tmp_path / "acs.csv"
    df.to_csv(path, index=False)
    return path


def _set(col: str, row: int, value: object):  # type: ignore[no-untyped-def]
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[row, col] = value
        return df

    return edit


BAD_ACS = {
    "missing column": (lambda df: df.drop(columns=["WKHP"]), r"acs\.csv: column 'WKHP' is missing"),
    "wrong dtype": (
        _set("SCHL", 11, "bachelor"),
        r"acs\.csv: column 'SCHL', row 12 \(line 13.*not a number",
    ),
    "non-integer code": (_set("OCCP", 3, 12.5), r"acs\.csv: column 'OCCP', row 4.*not an integer"),
    "missing integer": (_set("POBP", 8, None), r"acs\.csv: column 'POBP', row 9.*missing value"),
    "header only": (lambda df: df.head(0), r"acs\.csv: no data rows \(header only\)"),
    "NaN label": (
        _set("PINCP", 20, np.nan),
        r"acs\.csv: column 'PINCP', row 21.*missing value \(NaN\) in a label",
    ),
    "label outside classes": (
        _set("MAR", 30, 6),
        r"acs\.csv: column 'MAR', row 31.*outside its classes \[1, 2, 3, 4, 5\]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ACS))
def test_bad_local_input_is_rejected(case: str, tmp_path: Path) -> None:
    edit, pattern = BAD_ACS[case]
    path = _acs_csv(tmp_path, edit)
    out = tmp_path / "raw"
    with pytest.raises(SourceError, match=pattern):
        acquire_local(ACS, LocalConfig(path=str(path)), out)
    assert not out.exists() or not any(out.iterdir())


def test_empty_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "acs.csv").write_bytes(b"")
    with pytest.raises(SourceError, match=r"acs\.csv: the file is empty"):
        acquire_local(ACS, LocalConfig(path=str(tmp_path / "acs.csv")), tmp_path / "raw")
    write_higgs_gz(tmp_path / "e.csv.gz", raw_frame(HIGGS, 0))
    with pytest.raises(SourceError, match=r"e\.csv\.gz: the file is empty"):
        read_raw_file(tmp_path / "e.csv.gz", HIGGS, "data")


def test_binary_label_outside_classes_and_wrong_width_in_higgs(tmp_path: Path) -> None:
    df = raw_frame(HIGGS, 40)
    df.loc[17, "label"] = 2.0
    with pytest.raises(SourceError, match=r"h\.csv\.gz: column 'label', row 18 \(line 18.*\[0, 1\]"):
        read_raw_file(write_higgs_gz(tmp_path / "h.csv.gz", df), HIGGS, "data")
    with pytest.raises(SourceError, match=r"must have 29 columns .* line 1 has 28"):
        read_raw_file(write_higgs_gz(tmp_path / "w.csv.gz", raw_frame(HIGGS, 5).iloc[:, :28]), HIGGS, "data")


def test_parquet_bad_values_name_column_and_row(tmp_path: Path) -> None:
    df = raw_frame(ALI, 30)
    df["click"] = df["click"].astype(float)
    df.loc[12, "click"] = np.nan
    df.to_parquet(tmp_path / "train.parquet")
    with pytest.raises(SourceError, match=r"train\.parquet: column 'click', row 13: missing value"):
        read_raw_file(tmp_path / "train.parquet", ALI, "train")


def test_second_file_failing_leaves_no_output(tmp_path: Path) -> None:
    src = tmp_path / "ali"
    src.mkdir()
    raw_frame(ALI, 30).to_csv(src / "train.csv", index=False)
    bad = raw_frame(ALI, 30)
    bad.loc[5, "conversion"] = 3
    bad.to_csv(src / "test.csv", index=False)
    out = tmp_path / "raw"
    with pytest.raises(SourceError, match=r"test\.csv: column 'conversion', row 6"):
        acquire_local(ALI, LocalConfig(path=str(src)), out)
    assert not any(out.iterdir())  # train.parquet, written first, was removed


def test_local_path_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"datasets\.higgs\.local\.path .* not set"):
        acquire_local(HIGGS, LocalConfig(path=None), tmp_path / "raw")
    with pytest.raises(SourceError, match=r"nope\.csv\.gz: no such file"):
        acquire_local(HIGGS, LocalConfig(path=str(tmp_path / "nope.csv.gz")), tmp_path / "raw")
    (tmp_path / "ali").mkdir()
    raw_frame(ALI, 5).to_csv(tmp_path / "ali" / "train.csv", index=False)
    with pytest.raises(SourceError, match=r"found no file\(s\) for 'aliexpress' raw file 'test'"):
        acquire_local(ALI, LocalConfig(path=str(tmp_path / "ali")), tmp_path / "raw")


# ------------------------------------------------------------------------------------------------
# `remote`


@pytest.fixture
def server() -> Iterator[FixtureServer]:
    with FixtureServer() as s:
        yield s


def _remote(url: str | None, fmt: str, sha256: str | None = None) -> RemoteConfig:
    return RemoteConfig(
        url=url,
        sha256=sha256,
        format=fmt,
        retries=2,
        backoff_seconds=0.01,
        timeout_seconds=5,  # type: ignore[arg-type]
    )


def test_remote_higgs_download_verify_convert_and_cache(server: FixtureServer, tmp_path: Path) -> None:
    body = write_higgs_gz(tmp_path / "src.csv.gz", raw_frame(HIGGS, 100)).read_bytes()
    sha = hashlib.sha256(body).hexdigest()
    url = server.add("/ml/00280/HIGGS.csv.gz", Reply(body))
    info = acquire_remote(HIGGS, _remote(url, "csv.gz", sha), tmp_path / "raw", tmp_path / "cache")
    assert info == {
        "source": "remote",
        "standin": False,
        "files": {"data": {"rows": 100, "sha256": sha, "url": url}},
    }
    assert (tmp_path / "cache" / "higgs" / "HIGGS.csv.gz").read_bytes() == body
    expect_dtypes(pd.read_parquet(tmp_path / "raw" / "data.parquet"), HIGGS)
    acquire_remote(HIGGS, _remote(url, "csv.gz", sha), tmp_path / "raw2", tmp_path / "cache")
    assert len(server.seen("/ml/00280/HIGGS.csv.gz")) == 1  # the re-run used the cache


def test_remote_corrupt_download_never_reaches_the_output(server: FixtureServer, tmp_path: Path) -> None:
    body = write_higgs_gz(tmp_path / "src.csv.gz", raw_frame(HIGGS, 100)).read_bytes()
    url = server.add("/HIGGS.csv.gz", Reply(body[: len(body) // 2]))  # cut short, no checksum pinned
    with pytest.raises(Exception, match="rejected"):
        acquire_remote(HIGGS, _remote(url, "csv.gz"), tmp_path / "raw", tmp_path / "cache")
    assert not (tmp_path / "raw").exists() or not any((tmp_path / "raw").iterdir())
    assert not any((tmp_path / "cache" / "higgs").iterdir())


def test_remote_acs_parquet_without_checksum_logs_it(
    server: FixtureServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    buf = io.BytesIO()
    raw_frame(ACS, 50).astype(float).to_parquet(buf)
    url = server.add("/datasets/0004/43137/dataset_43137.pq", Reply(buf.getvalue()))
    with caplog.at_level(logging.WARNING, logger="multitab.datasets.sources"):
        info = acquire_remote(ACS, _remote(url, "parquet"), tmp_path / "raw", tmp_path / "cache")
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    assert info["files"]["data"]["sha256"] == sha
    assert any(sha in r.getMessage() and "pin it" in r.getMessage() for r in caplog.records)
    expect_dtypes(pd.read_parquet(tmp_path / "raw" / "data.parquet"), ACS)


def _ali_members(tmp_path: Path) -> dict[str, bytes]:
    return {
        "AliExpress_NL/train.csv": raw_frame(ALI, 60, seed=3).to_csv(index=False).encode(),
        "AliExpress_NL/test.csv": raw_frame(ALI, 25, seed=4).to_csv(index=False).encode(),
        "__MACOSX/AliExpress_NL/._train.csv": b"junk",
    }


def test_remote_aliexpress_zip_from_url(server: FixtureServer, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in _ali_members(tmp_path).items():
            z.writestr(name, data)
    url = server.add("/AliExpress_NL.zip", Reply(buf.getvalue()))
    info = acquire_remote(ALI, _remote(url, "zip"), tmp_path / "raw", tmp_path / "cache")
    assert {k: v["rows"] for k, v in info["files"].items()} == {"train": 60, "test": 25}
    assert info["files"]["train"]["member"] == "train.csv"
    for key in ("train", "test"):
        expect_dtypes(pd.read_parquet(tmp_path / "raw" / f"{key}.parquet"), ALI)


def test_remote_aliexpress_local_tar_gz(tmp_path: Path) -> None:
    archive = tmp_path / "AliExpress_NL.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for name, data in _ali_members(tmp_path).items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    info = acquire_remote(ALI, _remote(str(archive), "tar.gz"), tmp_path / "raw", tmp_path / "cache")
    assert info["files"]["test"]["rows"] == 25
    with pytest.raises(SourceError, match="sha256 .* does not match"):
        acquire_remote(ALI, _remote(str(archive), "tar.gz", "0" * 64), tmp_path / "raw", tmp_path / "cache")


def test_remote_aliexpress_without_url_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="needs a login"):
        acquire_remote(ALI, _remote(None, "zip"), tmp_path / "raw", tmp_path / "cache")


def test_remote_404_is_a_clear_error(server: FixtureServer, tmp_path: Path) -> None:
    url = server.url("/gone.csv.gz")
    with pytest.raises(Exception, match=r"HTTP 404.*params\.yaml"):
        acquire_remote(HIGGS, _remote(url, "csv.gz"), tmp_path / "raw", tmp_path / "cache")
    assert len(server.seen("/gone.csv.gz")) == 1


# ------------------------------------------------------------------------------------------------
# Through the data steps: what `local` writes is what split@D reads


def _valid_for_split(schema: DatasetSchema, n: int, seed: int) -> pd.DataFrame:
    df = raw_frame(schema, n, seed)
    rng = np.random.default_rng(seed)
    for f in schema.features:
        if f.levels is not None:  # Higgs b-tags take three float values
            df[f.name] = rng.choice(np.asarray(f.levels, dtype=np.float32), n)
    return df


@pytest.mark.parametrize("name", ["higgs", "acs_income", "aliexpress"])
def test_local_source_feeds_the_split_step(name: str, tmp_path: Path) -> None:
    import dataclasses

    from multitab.config import load_params
    from multitab.datasets.steps import acquire, split

    schema = get_schema(name)
    if name == "aliexpress":
        src = tmp_path / "AliExpress_NL"
        src.mkdir()
        _valid_for_split(schema, 400, 1).to_csv(src / "train.csv", index=False)
        _valid_for_split(schema, 100, 2).to_csv(src / "test.csv", index=False)
        total = 500
    elif name == "higgs":
        src = write_higgs_gz(tmp_path / "HIGGS.csv.gz", _valid_for_split(schema, 400, 1))
        total = 400
    else:
        src = tmp_path / "acs.parquet"
        _valid_for_split(schema, 400, 1).to_parquet(src)
        total = 400
    cfg = dataclasses.replace(load_params(Path(__file__).parents[1] / "params.yaml").dataset(name), source="local",
                              local=LocalConfig(path=str(src)))
    acquire(schema, cfg, tmp_path / "raw", tmp_path / "cache")
    info = split(schema, cfg, tmp_path / "raw", tmp_path / "splits")
    assert info["source"] == "local" and info["standin"] is False
    assert sum(info["n_rows"].values()) == total


def test_acquire_writes_row_group_by_row_group_the_file_of_the_whole_table(tmp_path: Path, monkeypatch) -> None:
    """acquire streams a raw file into Parquet (sources.typed.write_raw_parquet) holding one row group at a
    time: the bytes `pq.write_table(read_raw_table(...))` writes, across input batches and row groups."""
    import pyarrow.parquet as pq

    from multitab.datasets.columnar import parquet_options
    from multitab.datasets.sources import readers, typed

    monkeypatch.setattr(readers, "PARQUET_BATCH_ROWS", 5)  # input batches that straddle row groups
    monkeypatch.setattr(typed, "ROW_GROUP_ROWS", 7)
    frame = raw_frame(HIGGS, 40)
    frame.loc[3, "lepton_eta"] = np.nan
    frame.to_parquet(tmp_path / "HIGGS.parquet", index=False)
    typed.write_raw_parquet(tmp_path / "HIGGS.parquet", tmp_path / "streamed.parquet", HIGGS, "data")
    whole = typed.read_raw_table(tmp_path / "HIGGS.parquet", HIGGS, "data")
    pq.write_table(whole, tmp_path / "whole.parquet", row_group_size=7, **parquet_options(whole.schema))
    assert (tmp_path / "streamed.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert pq.ParquetFile(tmp_path / "streamed.parquet").metadata.num_row_groups == 6
    info = acquire_local(HIGGS, LocalConfig(path=str(tmp_path / "HIGGS.parquet")), tmp_path / "raw")
    assert info["files"]["data"]["rows"] == 40


def test_a_directory_where_a_raw_file_belongs_is_named_as_one(tmp_path: Path) -> None:
    """`remote.url` naming a local path that is a directory, and a raw file's name in a `local.path` folder
    taken by a directory: each message says it is a directory (they said "no such file", or listed the
    folder's files without it)."""
    folder = tmp_path / "HIGGS.csv.gz"
    folder.mkdir()
    with pytest.raises(SourceError,
                       match=r"HIGGS\.csv\.gz: is a directory, not a file \(datasets\.higgs\.remote\.url\)"):
        acquire_remote(HIGGS, _remote(str(folder), "csv.gz"), tmp_path / "raw", tmp_path / "cache")
    (tmp_path / "ali").mkdir()
    raw_frame(ALI, 5).to_csv(tmp_path / "ali" / "train.csv", index=False)
    (tmp_path / "ali" / "test.csv").mkdir()
    with pytest.raises(SourceError,
                       match=r"found no file\(s\) \(test\.csv: a directory, not a file\) for 'aliexpress'"):
        acquire_local(ALI, LocalConfig(path=str(tmp_path / "ali")), tmp_path / "raw")
