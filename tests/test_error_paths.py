"""What a stage does with input a retry cannot change, and with the debris of a killed earlier run: one
line naming the file and what to do, exit status BAD_INPUT (so flows.pipeline does not retry it), no
traceback; temporaries of a killed write removed at the next start; an aggregate that fails half-way
changes no output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _slow_import import slow_import_env
from multitab.files.io import all_or_nothing, write_text
from multitab.runtime.exit_codes import BAD_INPUT
from stages._common import run, run_validation

ROOT = Path(__file__).resolve().parents[1]


def test_a_file_the_stage_may_not_read_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    locked = tmp_path / "data.csv"
    locked.write_text("x\n1\n")
    locked.chmod(0)
    if os.access(locked, os.R_OK):  # root reads anything: raise what open() raises for another user
        def body() -> None:
            raise PermissionError(13, "Permission denied", str(locked))
    else:
        def body() -> None:
            locked.read_text()
    assert run("acquire@toy", body) == BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert err == f"[acquire@toy] error: {locked}: permission denied; check the file's permissions"


def test_cuda_without_a_gpu_is_bad_input(capsys: pytest.CaptureFixture) -> None:
    import torch

    from multitab.training.device import resolve_device

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert run("train@toy", lambda: resolve_device("cuda")) == BAD_INPUT
    assert "train.device is 'cuda' but torch sees no CUDA device" in capsys.readouterr().err


def test_ctrl_c_is_one_line_without_traceback(capsys: pytest.CaptureFixture) -> None:
    def body() -> None:
        raise KeyboardInterrupt

    assert run("train@toy", body) == 130
    assert capsys.readouterr().err.strip() == "[train@toy] interrupted (Ctrl-C); run again to continue"


def test_ctrl_c_in_a_validation_stage_is_one_line_without_traceback(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    def body(params: object) -> None:
        raise KeyboardInterrupt

    params = tmp_path / "params.yaml"
    params.write_text("{}\n")
    try:
        code = run_validation("validate_raw@toy", body, str(tmp_path / "verdict.json"), False, str(params))
    except KeyboardInterrupt:
        code = None  # it escaped: a traceback
    assert code == 130
    assert capsys.readouterr().err.strip() == "[validate_raw@toy] interrupted (Ctrl-C); run again to continue"


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_a_stage_imports_is_one_line_and_130(tmp_path: Path, presses: int) -> None:
    """Ctrl-C (to the whole process group, as a terminal sends it) while `python -m stages.<name>` still
    imports pandas and torch: no KeyboardInterrupt traceback from inside an import. The stage acts on it
    when it starts, with its own line; a second Ctrl-C ends it at once."""
    env, importing = slow_import_env(tmp_path / "site", "stages.icl", "pandas",
                                     {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])})
    proc = subprocess.Popen([sys.executable, "-m", "stages.icl"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not importing.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert importing.exists(), proc.communicate()
        for _ in range(presses):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.2)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    line = ("[icl] interrupted (Ctrl-C); run again to continue" if presses == 1 else
            "stages.icl: stopped by SIGINT (Ctrl-C) while starting; run the same command again")
    assert err.strip() == line


def test_temporaries_of_a_killed_run_are_removed_at_the_next_start(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    out = raw / "higgs"
    raw.mkdir()
    left = [raw / ".higgs.k3j2.tmp", raw / ".higgs.old"]  # a killed atomic_dir write, an interrupted swap
    left[0].mkdir()
    (left[0] / "data.parquet").write_bytes(b"x" * 1000)
    left[1].mkdir()
    other = raw / ".acs_income.x1.tmp"  # another stage's (acquire@acs_income may be running now)
    other.write_text("busy")
    assert run("acquire@higgs", lambda: None, outputs=[out]) == 0
    assert not any(p.exists() for p in left) and other.exists()


def test_aggregate_stage_cleans_only_its_own_temporaries(tmp_path: Path) -> None:
    from stages.aggregate import OWN_STEMS

    tables = tmp_path / "tables"
    tables.mkdir()
    mine = tables / ".table3_test_results.md.ab12.tmp"
    theirs = [tables / ".complexity.csv.zz.tmp", tables / ".fig3_label_correlations.csv.q.tmp"]
    for p in (mine, *theirs):
        p.write_text("partial")
    from multitab.files.io import remove_stale_temporaries

    assert remove_stale_temporaries(tables, stems=OWN_STEMS) == [mine]
    assert all(p.exists() for p in theirs)


def test_all_or_nothing_changes_no_output_when_it_fails_half_way(tmp_path: Path) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    write_text(a, "old a")
    write_text(b, "old b")
    with pytest.raises(RuntimeError), all_or_nothing():
        write_text(a, "new a")
        assert a.read_text() == "old a"  # not yet replaced
        raise RuntimeError("killed half-way")
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "b.md"]  # no temporary left
    with all_or_nothing():
        write_text(a, "new a")
        write_text(b, "new b")
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
