"""Files a user may have that are not broken but not what a reader expects: CSV written with old Mac line
ends (CR only), read as the same file with LF ends is."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from multitab.config.data import LocalConfig
from multitab.datasets.schema import get_schema
from multitab.datasets.sources import SourceError, acquire_local, read_raw_file
from multitab.datasets.sources.formats import iter_lines

FIX = Path(__file__).parent / "fixtures"


def as_cr(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r")


# ------------------------------------------------------------------------------------- CR-only line ends


@pytest.mark.parametrize(("dataset", "name"), [("higgs", "higgs_uci.csv"), ("higgs", "higgs_header_reordered.csv"),
                                               ("acs_income", "acs_one_state.csv"),
                                               ("acs_income", "acs_folktables.csv")])
@pytest.mark.parametrize("gz", [False, True])
def test_cr_only_csv_reads_as_the_lf_file(dataset: str, name: str, gz: bool, tmp_path: Path) -> None:
    data = as_cr((FIX / name).read_bytes())
    assert b"\n" not in data
    path = tmp_path / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    got = read_raw_file(path, get_schema(dataset), "data")
    expected = read_raw_file(FIX / name, get_schema(dataset), "data")
    assert got.equals(expected) and len(got) > 30


def test_cr_only_aliexpress_folder_is_acquired(tmp_path: Path) -> None:
    folder = tmp_path / "AliExpress_NL"
    folder.mkdir()
    for name in ("train.csv", "test.csv"):
        (folder / name).write_bytes(as_cr((FIX / "aliexpress_nl" / name).read_bytes()))
    info = acquire_local(get_schema("aliexpress"), LocalConfig(path=str(folder)), tmp_path / "raw")
    assert {k: v["rows"] for k, v in info["files"].items()} == {"train": 40, "test": 20}


def test_cr_only_csv_errors_name_the_right_line(tmp_path: Path) -> None:
    lines = as_cr((FIX / "acs_one_state.csv").read_bytes()).split(b"\r")
    lines[8] = lines[8].replace(b",6,", b",6\xe9,", 1)  # a Latin-1 byte in a value on line 9
    (tmp_path / "acs.csv").write_bytes(b"\r".join(lines))
    with pytest.raises(SourceError, match=r"acs\.csv line 9: column '\w+': byte .* is not UTF-8"):
        read_raw_file(tmp_path / "acs.csv", get_schema("acs_income"), "data")
    lines = as_cr((FIX / "acs_one_state.csv").read_bytes()).split(b"\r")
    lines[5] = lines[5].replace(b",", b",x", 1)  # COW of data row 5 is not a number
    (tmp_path / "acs.csv").write_bytes(b"\r".join(lines))
    with pytest.raises(SourceError, match=r"column 'COW', row 5 \(line 6\): value 'x"):
        read_raw_file(tmp_path / "acs.csv", get_schema("acs_income"), "data")


def test_cr_only_arff_is_read(tmp_path: Path) -> None:
    csv_lines = (FIX / "acs_one_state.csv").read_text().splitlines()
    header = ["% ACSIncome", "@relation 'ACSIncome'", ""]
    header += [f"@attribute '{c}' numeric" for c in csv_lines[0].split(",")] + ["", "@data"]
    (tmp_path / "acs.arff").write_bytes("\r".join(header + csv_lines[1:]).encode() + b"\r")
    got = read_raw_file(tmp_path / "acs.arff", get_schema("acs_income"), "data")
    assert got.equals(read_raw_file(FIX / "acs_one_state.csv", get_schema("acs_income"), "data"))


def test_line_ends_split_across_read_blocks() -> None:
    data = b"ab\r\ncd\ref\ngh\r\r\nij"
    for block in (1, 2, 3, 4, 64):
        got = list(iter_lines(io.BytesIO(data), block=block))
        assert got == [(b"ab", 4), (b"cd", 7), (b"ef", 10), (b"gh", 13), (b"", 15), (b"ij", 17)], block
    assert list(iter_lines(io.BytesIO(data), partial=False))[-1] == (b"", 15)
