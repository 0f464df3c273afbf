"""Files a user may have that are not broken but not what a reader expects: CSV written with old Mac line
ends (CR only), read as the same file with LF ends is; and a named pipe (FIFO) given as a dataset's
`local.path`, which DVC would wait on forever when it hashes the dependency: refused, with the params key
and the path, by `python -m flows.pipeline` before DVC sees it and by acquire@D."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _toy_dvc import ORCHESTRATION, PY, make_project
from multitab.config.data import LocalConfig
from multitab.datasets.schema import get_schema
from multitab.datasets.sources import SourceError, acquire_local, read_raw_file
from multitab.datasets.sources.formats import iter_lines
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
HANG_SECONDS = 60  # a named pipe that is read waits forever: fail after this instead


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


# ------------------------------------------------------------------------------------- a named pipe


def params_with_local_path(tmp_path: Path, dataset: str, path: Path) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"][dataset].update(source="local", local={"path": str(path)})
    out = tmp_path / "params.yaml"
    out.write_text(yaml.safe_dump(params, sort_keys=False))
    return out


def run_without_hanging(args: list[str], cwd: Path | None = None,
                        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args[:3])} still ran after {HANG_SECONDS} s: it is waiting on the named pipe "
                    "instead of refusing it")


@pytest.mark.parametrize("inside", [False, True])
def test_acquire_refuses_a_named_pipe(inside: bool, tmp_path: Path) -> None:
    dataset = "aliexpress" if inside else "acs_income"
    if inside:  # a folder whose train.csv is a pipe
        local = tmp_path / "AliExpress_NL"
        local.mkdir()
        shutil.copy(FIX / "aliexpress_nl" / "test.csv", local / "test.csv")
        pipe = local / "train.csv"
    else:
        local = pipe = tmp_path / "acs.csv"
    os.mkfifo(pipe)
    params = params_with_local_path(tmp_path, dataset, local)
    out = tmp_path / "raw"
    proc = run_without_hanging([PY, "-m", "stages.acquire", "--params", str(params), "--dataset", dataset,
                                "--out", str(out)], cwd=ROOT)
    assert proc.returncode == BAD_INPUT, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"[acquire@{dataset}] error: datasets.{dataset}.local.path: {local}")
    named = f"holds {pipe}, which is" if inside else f"{pipe} is"
    assert f"{named} a named pipe (FIFO), not a file or folder" in line
    assert not out.exists()


def test_flow_refuses_a_named_pipe_before_dvc_hashes_it(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"acquire": {"cmd": "echo read", "deps": ["local/acs.csv"]}})
    (root / "local").mkdir()
    os.mkfifo(root / "local" / "acs.csv")
    acs = yaml.safe_load((ROOT / "params.yaml").read_text())["datasets"]["acs_income"]
    acs["local"]["path"] = "local/acs.csv"
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestration": ORCHESTRATION,
                                                      "datasets": {"acs_income": acs}}, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = run_without_hanging([PY, "-m", "flows.pipeline", "--root", str(root)], env=env)
    assert proc.returncode == BAD_INPUT, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (f"flows.pipeline: {root / 'params.yaml'}: datasets.acs_income.local.path: local/acs.csv is a "
                    "named pipe (FIFO), not a file or folder: reading it would wait forever (DVC hashes it as a "
                    "dependency); point the key at the data file, or at a folder of data files")
