"""Bad real files: each gets one message naming the user's file (and archive member), column and
line, and saying what to do; acquire@D prints it on one line and exits BAD_INPUT (3), leaving earlier output intact."""

from __future__ import annotations

import datetime
import errno
import gzip
import io
import lzma
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from _toy_dvc import run_dvc  # tests/ is on sys.path (pytest's default import mode)
from multitab.config import parse_params
from multitab.config.data import LocalConfig
from multitab.datasets.schema import get_schema
from multitab.datasets.sources import SourceError, acquire_local, read_raw_file
from multitab.runs.stages import data_stages
from multitab.runtime.exit_codes import BAD_INPUT
from stages import acquire

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
HIGGS = get_schema("higgs")
ACS = get_schema("acs_income")
ALI = get_schema("aliexpress")


def higgs_lines() -> list[str]:
    return (FIX / "higgs_uci.csv").read_text().splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def set_field(line: str, index: int, value: str) -> str:
    fields = line.split(",")
    fields[index] = value
    return ",".join(fields)


# ------------------------------------------------------------------------------------------------ facts


def test_per_jet_btag_levels_are_accepted() -> None:
    # jet 2's top level 2.2149, jet 3's 2.5482, jet 4's 3.1020 are in the fixture (the release's layout)
    df = read_raw_file(FIX / "higgs_uci.csv", HIGGS, "data")
    assert abs(df["jet2_btag"].max() - 2.2149) < 1e-3 and abs(df["jet4_btag"].max() - 3.1020) < 1e-3


@pytest.mark.parametrize("value", ["", "nan", "?"])
def test_missing_btag_stops_at_acquire(value: str, tmp_path: Path) -> None:
    lines = higgs_lines()
    lines[6] = set_field(lines[6], 13, value)  # column 13: jet2_btag
    path = write(tmp_path / "HIGGS.csv", lines)
    with pytest.raises(SourceError, match=r"HIGGS\.csv: column 'jet2_btag', row 7 \(line 7\): missing value"):
        acquire_local(HIGGS, LocalConfig(path=str(path)), tmp_path / "raw")


def test_unknown_btag_level_names_file_column_line(tmp_path: Path) -> None:
    lines = higgs_lines()
    lines[11] = set_field(lines[11], 9, "2.2149")  # jet 2's top level in jet 1's column
    with pytest.raises(SourceError, match=r"column 'jet1_btag', row 12 \(line 12\): value 2\.21.* none of"):
        read_raw_file(write(tmp_path / "h.csv", lines), HIGGS, "data")


@pytest.mark.parametrize("value", ["inf", "-inf", "1e300"])
def test_label_source_must_be_finite_before_its_threshold(value: str, tmp_path: Path) -> None:
    lines = (FIX / "acs_one_state.csv").read_text().splitlines()
    lines[5] = set_field(lines[5], 11, value)  # PINCP
    with pytest.raises(SourceError, match=r"column 'PINCP', row 5 \(line 6\): .*label source"):
        read_raw_file(write(tmp_path / "acs.csv", lines), ACS, "data")


def test_float32_overflow_in_a_feature_is_an_error(tmp_path: Path) -> None:
    lines = higgs_lines()
    lines[3] = set_field(lines[3], 1, "1e300")  # lepton_pT
    with pytest.raises(SourceError, match=r"column 'lepton_pT', row 4 \(line 4\): value 1e\+300 is beyond"):
        read_raw_file(write(tmp_path / "h.csv", lines), HIGGS, "data")


# ------------------------------------------------------------------------------------------------ headers


def test_header_with_other_names_is_explained(tmp_path: Path) -> None:
    lines = higgs_lines()
    header = ["class"] + [f"f{i}" for i in range(1, 29)]
    with pytest.raises(SourceError, match=r"h\.csv line 1 is a header .* expected no header .* or a header"):
        read_raw_file(write(tmp_path / "h.csv", [",".join(header), *lines]), HIGGS, "data")


def test_missing_header_is_explained(tmp_path: Path) -> None:
    lines = (FIX / "acs_one_state.csv").read_text().splitlines()
    with pytest.raises(SourceError, match=r"acs\.csv line 1 holds data .* expected a header line"):
        read_raw_file(write(tmp_path / "acs.csv", lines[1:]), ACS, "data")


# ------------------------------------------------------------------------------------------------ compression


def test_gzip_named_csv_and_plain_named_csv_gz_are_read(tmp_path: Path) -> None:
    data = (FIX / "higgs_uci.csv").read_bytes()
    gz_as_csv = tmp_path / "HIGGS.csv"
    gz_as_csv.write_bytes(gzip.compress(data))
    plain_as_gz = tmp_path / "HIGGS.csv.gz"
    plain_as_gz.write_bytes(data)
    want = read_raw_file(FIX / "higgs_uci.csv", HIGGS, "data")
    for path in (gz_as_csv, plain_as_gz):
        assert read_raw_file(path, HIGGS, "data").equals(want)


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    blob = gzip.compress((FIX / "higgs_uci.csv").read_bytes() * 40)
    path = tmp_path / "HIGGS.csv.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(SourceError, match=r"HIGGS\.csv\.gz: the compressed data ends early .* download or copy") as e:
        read_raw_file(path, HIGGS, "data")
    line = int(str(e.value).split("after line ")[1].split()[0])
    assert 0 < line < 40 * 40  # the last complete line before the cut


def test_bad_utf8_names_file_line_and_column(tmp_path: Path) -> None:
    lines = (FIX / "acs_one_state.csv").read_bytes().split(b"\n")
    lines[8] = lines[8].replace(b",6,", b",6\xe9,", 1)  # a Latin-1 byte in a value
    path = tmp_path / "acs.csv"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SourceError, match=r"acs\.csv line 9: column '\w+': byte .* is not UTF-8"):
        read_raw_file(path, ACS, "data")


# ------------------------------------------------------------------------------------------------ archives


def ali_zip(path: Path, train: bytes | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("AliExpress_NL/train.csv", train or (FIX / "aliexpress_nl" / "train.csv").read_bytes())
        z.writestr("AliExpress_NL/test.csv", (FIX / "aliexpress_nl" / "test.csv").read_bytes())
    return path


def test_error_inside_an_archive_names_the_member(tmp_path: Path) -> None:
    lines = (FIX / "aliexpress_nl" / "train.csv").read_text().splitlines()
    lines[3] = set_field(lines[3], 80, "2")  # click
    archive = ali_zip(tmp_path / "AliExpress_NL.zip", ("\n".join(lines) + "\n").encode())
    with pytest.raises(SourceError,
                       match=r"AliExpress_NL\.zip:AliExpress_NL/train\.csv: column 'click', row 3 \(line 4\)"):
        acquire_local(ALI, LocalConfig(path=str(archive)), tmp_path / "raw")


def test_truncated_zip(tmp_path: Path) -> None:
    blob = ali_zip(tmp_path / "full.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(SourceError, match=r"cut\.zip: not a readable zip archive .* download or copy it again"):
        acquire_local(ALI, LocalConfig(path=str(tmp_path / "cut.zip")), tmp_path / "raw")


def test_corrupt_zip_member(tmp_path: Path) -> None:
    blob = bytearray(ali_zip(tmp_path / "a.zip").read_bytes())
    start = blob.index(b"AliExpress_NL/train.csv") + 200  # inside train.csv's compressed data
    blob[start : start + 64] = bytes(64)
    (tmp_path / "bad.zip").write_bytes(bytes(blob))
    with pytest.raises(SourceError, match=r"bad\.zip:AliExpress_NL/train\.csv: the archive member is damaged"):
        acquire_local(ALI, LocalConfig(path=str(tmp_path / "bad.zip")), tmp_path / "raw")


def test_truncated_tar_gz(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name in ("train", "test"):
            data = (FIX / "aliexpress_nl" / f"{name}.csv").read_bytes() * 5
            info = tarfile.TarInfo(f"AliExpress_NL/{name}.csv")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    (tmp_path / "cut.tar.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(SourceError, match=r"cut\.tar\.gz.*(not a readable tar archive|member is damaged).*again"):
        acquire_local(ALI, LocalConfig(path=str(tmp_path / "cut.tar.gz")), tmp_path / "raw")


def test_folder_without_the_files_lists_what_it_holds(tmp_path: Path) -> None:
    folder = tmp_path / "ali"
    folder.mkdir()
    shutil.copy(FIX / "aliexpress_nl" / "train.csv", folder / "train.csv")
    (folder / "tst.csv").write_text("x\n")
    with pytest.raises(SourceError,
                       match=r"raw file 'test'.*The folder holds 2 file\(s\): \['train\.csv', 'tst\.csv'\]"):
        acquire_local(ALI, LocalConfig(path=str(folder)), tmp_path / "raw")


# ------------------------------------------------------------------------------------------------ the stage


def test_stage_prints_one_line_and_keeps_earlier_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"]["aliexpress"].update(source="local", local={"path": str(FIX / "aliexpress_nl")})
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(params))
    out = tmp_path / "raw"
    assert acquire.main(["--params", str(p), "--dataset", "aliexpress", "--out", str(out)]) == 0
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    blob = ali_zip(tmp_path / "full.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(blob[: len(blob) // 3])
    params["datasets"]["aliexpress"]["local"]["path"] = str(tmp_path / "cut.zip")
    p.write_text(yaml.safe_dump(params))
    capsys.readouterr()
    assert acquire.main(["--params", str(p), "--dataset", "aliexpress", "--out", str(out)]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("[acquire@aliexpress] error: ") and "cut.zip" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")], "temporary files left"


# ------------------------------------------------------------------------------------------------ stale file


def test_changed_local_file_reruns_acquire_and_dvc_status_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("stages", "src", "local"):
        shutil.copytree(ROOT / item, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
    dvcyaml = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    shutil.copy(FIX / "acs_one_state.csv", repo / "local" / "acs_income" / "acs.csv")
    params["datasets"]["acs_income"].update(source="local", local={"path": "local/acs_income/acs.csv"})
    # what runs.yaml gives the data stages to iterate (multitab.runs.stages), inline
    lists = data_stages(parse_params({"datasets": params["datasets"]}))
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"vars": [lists],
                                                   "stages": {"acquire": dvcyaml["stages"]["acquire"]}}))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    run_dvc(["init", "-q"], repo)
    assert "Running stage 'acquire@acs_income'" in run_dvc(["repro", "acquire@acs_income"], repo)
    assert "changed" not in run_dvc(["status", "acquire@acs_income"], repo)
    lines = (repo / "local" / "acs_income" / "acs.csv").read_text().splitlines()
    (repo / "local" / "acs_income" / "acs.csv").write_text("\n".join(lines[:-3]) + "\n")  # a new version
    status = run_dvc(["status", "acquire@acs_income"], repo)
    assert "modified:" in status and "local/acs_income/acs.csv" in status
    assert "Running stage 'acquire@acs_income'" in run_dvc(["repro", "acquire@acs_income"], repo)


def test_dropped_columns_that_vary_are_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "ali"
    shutil.copytree(FIX / "aliexpress_nl", folder)
    with caplog.at_level("WARNING", logger="multitab.datasets.sources"):
        acquire_local(ALI, LocalConfig(path=str(folder)), tmp_path / "raw1")
    assert not [r for r in caplog.records if "varies" in r.getMessage()]
    lines = (folder / "train.csv").read_text().splitlines()
    lines[2] = set_field(lines[2], 17 + 57, "0.5")  # numerical_58, constant in the release
    write(folder / "train.csv", lines)
    with caplog.at_level("WARNING", logger="multitab.datasets.sources"):
        acquire_local(ALI, LocalConfig(path=str(folder)), tmp_path / "raw2")
    assert any("'numerical_58' varies" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("kind", "compress", "undo"), [
    ("xz", "lzma", "xz -d"), ("bzip2", "bz2", "bunzip2"),
])
def test_other_compression_named_csv_gz_is_named(kind: str, compress: str, undo: str, tmp_path: Path) -> None:
    import importlib

    path = tmp_path / "HIGGS.csv.gz"
    path.write_bytes(importlib.import_module(compress).compress((FIX / "higgs_uci.csv").read_bytes()))
    with pytest.raises(SourceError) as e:
        read_raw_file(path, HIGGS, "data")
    assert str(e.value) == (f"{path}: the file is {kind}-compressed (its first bytes say so), which is not read "
                            f"here; decompress it (`{undo}`) and use the CSV, or gzip it")


def test_parquet_text_and_uint64_values_name_file_column_row(tmp_path: Path) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pd.read_csv(FIX / "acs_one_state.csv")
    text = frame.astype({"PINCP": str})
    text.loc[3, "PINCP"] = "52_000"  # Python's float() takes it; no reader of numbers should
    text.to_parquet(tmp_path / "text.parquet")
    with pytest.raises(SourceError, match=r"text.parquet: column 'PINCP', row 4: value '52_000' is not a number"):
        read_raw_file(tmp_path / "text.parquet", ACS, "data")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    occ = pa.array([2**64 - 1, *frame.OCCP[1:].astype("uint64")], pa.uint64())
    pq.write_table(table.set_column(table.schema.get_field_index("OCCP"), "OCCP", occ), tmp_path / "big.parquet")
    with pytest.raises(SourceError, match=r"big.parquet: column 'OCCP', row 1: value 18446744073709551615 is "
                                          r"beyond the 64-bit integer range"):
        read_raw_file(tmp_path / "big.parquet", ACS, "data")


# ------------------------------------------------------------------------------------------------ one reader
# Every kind of bad file, given as a paper dataset's local file (acs_income) and as a declared dataset's file:
# acquire@D exits BAD_INPUT with one line naming the file and the cause, the same cause for both (one reader,
# multitab.datasets.sources.readers.FileReader).


def _acs_bytes() -> bytes:
    return (FIX / "acs_one_state.csv").read_bytes()


def _gzip_crc_error() -> bytes:
    blob = bytearray(gzip.compress(_acs_bytes()))
    blob[-8] ^= 0xFF  # the CRC-32 in the gzip trailer
    return bytes(blob)


def _parquet(path: Path, column: str, values: object) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(pd.read_csv(FIX / "acs_one_state.csv"), preserve_index=False)
    i = table.schema.get_field_index(column)
    pq.write_table(table.set_column(i, column, pa.array(values([v.as_py() for v in table.column(i)]))), path)


def _zip_as_csv(member: str = "acs.csv") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(member, _acs_bytes())
    return buf.getvalue()


BAD_KINDS: dict[str, tuple[str, object, str]] = {
    # kind: (file name, its bytes or a writer of it, what the message says)
    "latin-1 value": ("acs.csv", lambda: _acs_bytes().replace(b"\n66,", b"\n6\xe9,", 1),
                      r"acs\.csv line 3: column 'AGEP': byte b'\\xe9' is not UTF-8 text"),
    "latin-1 header": ("acs.csv", lambda: _acs_bytes().replace(b"AGEP", b"AGEP\xe9", 1),
                       r"acs\.csv line 1: byte b'\\xe9' at position 5 is not UTF-8 text"),
    "UTF-16": ("acs.csv", lambda: _acs_bytes().decode().encode("utf-16"),
               r"acs\.csv: the file is UTF-16 text \(its first bytes say so\), not CSV text; save it as UTF-8"),
    "gzip CRC error": ("acs.csv.gz", _gzip_crc_error,
                       r"acs\.csv\.gz: the compressed data ends early or is damaged after line \d+ .*again"),
    "truncated csv.gz": ("acs.csv.gz", lambda: gzip.compress(_acs_bytes())[:400],
                         r"acs\.csv\.gz: the compressed data ends early or is damaged after line \d+ .*again"),
    "xz named csv.gz": ("acs.csv.gz", lambda: lzma.compress(_acs_bytes()),
                        r"acs\.csv\.gz: the file is xz-compressed \(its first bytes say so\)"),
    "Excel workbook named csv": ("acs.csv", lambda: _zip_as_csv("[Content_Types].xml"),
                                 r"acs\.csv: the file is an Office file \(an Excel workbook\?\) .*save it as CSV"),
    "zip named csv": ("acs.csv", _zip_as_csv,
                      r"acs\.csv: the file is a zip archive \(its first bytes say so\), not CSV text; unzip it"),
    "duplicate header": ("acs.csv", lambda: _acs_bytes().replace(b",RAC1P,", b",WKHP,", 1),
                         r"acs\.csv: the header names column 'WKHP' twice \(columns 8 and 10\); rename one"),
    "short row": ("acs.csv", lambda: _acs_bytes().replace(b"\n66,1,", b"\n66,", 1),
                  r"acs\.csv: malformed CSV after about line \d+: .*Expected 12 columns, got 11"),
    "empty": ("acs.csv", lambda: b"", r"acs\.csv: the file is empty \(0 bytes\)"),
    "header only": ("acs.csv", lambda: _acs_bytes().splitlines(keepends=True)[0],
                    r"acs\.csv: no data rows \(header only\)"),
    "list column": ("acs.parquet", lambda p: _parquet(p, "WKHP", lambda v: [[x] for x in v]),
                    r"acs\.parquet: column 'WKHP' has type list<.*>, a nested type \(several values per cell\)"),
    "struct column": ("acs.parquet", lambda p: _parquet(p, "WKHP", lambda v: [{"h": x} for x in v]),
                      r"acs\.parquet: column 'WKHP' has type struct<h: int64>, a nested type"),
    "date column": ("acs.parquet", lambda p: _parquet(p, "WKHP", lambda v: [datetime.date(2020, 1, 1)] * len(v)),
                    r"acs\.parquet: column 'WKHP' has type date32\[day\], neither a number, a true/false value nor"),
    "truncated parquet": ("acs.parquet", lambda p: (_parquet(p, "WKHP", list), p.write_bytes(p.read_bytes()[:300])),
                          r"acs\.parquet: not a readable Parquet file"),
}


def _bad_file(folder: Path, kind: str) -> Path:
    name, make, _ = BAD_KINDS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if name.endswith(".parquet"):
        make(path)  # type: ignore[operator]
    else:
        path.write_bytes(make())  # type: ignore[operator]
    return path


def _acquire(tmp_path: Path, dataset: str, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    if dataset == "acs_income":
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["datasets"]["acs_income"].update(source="local", local={"path": str(path)})
    else:
        split = {"method": "shuffle", "seed": 0, "val_fraction": 0.15, "test_fraction": 0.15}
        params = {"datasets": {dataset: {"source": "local", "local": {"path": str(path)}, "split": split,
                                         "tasks": {"SEX": "binary"}}}}
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(params, sort_keys=False))
    capsys.readouterr()
    code = acquire.main(["--params", str(p), "--dataset", dataset, "--out", str(tmp_path / "raw")])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("dataset", ["acs_income", "mine"])  # a paper dataset's local file; a declared dataset's
@pytest.mark.parametrize("kind", list(BAD_KINDS))
def test_every_bad_file_is_refused_alike_naming_the_file(
    kind: str, dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad_file(tmp_path / "data", kind)
    code, err = _acquire(tmp_path, dataset, path, capsys)
    assert code == BAD_INPUT, err
    assert err.startswith(f"[acquire@{dataset}] error: {path}") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(BAD_KINDS[kind][2], err), err
    assert not (tmp_path / "raw").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_good_file_is_read_by_both_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the control of the test above: the file it spoils is accepted as a paper dataset's and a declared one's
    for dataset in ("acs_income", "mine"):
        (tmp_path / dataset / "data").mkdir(parents=True)
        path = tmp_path / dataset / "data" / "acs.csv"
        path.write_bytes(_acs_bytes())
        code, err = _acquire(tmp_path / dataset, dataset, path, capsys)
        assert code == 0, err


@pytest.mark.parametrize("dataset", ["acs_income", "mine"])
def test_a_disk_that_fills_while_writing_names_the_file_being_written(
    dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "acs.csv"
    path.write_bytes(_acs_bytes())
    assert _acquire(tmp_path, dataset, path, capsys)[0] == 0
    before = {f.name: f.read_bytes() for f in (tmp_path / "raw").iterdir()}

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    code, err = _acquire(tmp_path, dataset, path, capsys)
    # the file as it will be named, not the temporary folder it is written in (a full disk is retried: exit 1)
    named = tmp_path / "raw" / "data.parquet"
    assert code == 1 and err.startswith(f"[acquire@{dataset}] error: no space left on {named} ("), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert {f.name: f.read_bytes() for f in (tmp_path / "raw").iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
