"""A stage the kernel kills for memory (SIGKILL, which no handler sees): the flow's line for it says it was
probably memory, with the peak the stage last logged (multitab.memwatch), the machine's memory and what to
change; and DVC's cache still holds the stage's previous output, which `dvc checkout <stage>` (the line says
so) puts back after DVC removed it to run the command."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from _toy_dvc import make_project, run_dvc, write_stage
from flows.dvc_output import cause, exit_code, stream_command
from multitab import memwatch

KILLED = """
    import logging, os, pathlib, signal, sys
    if pathlib.Path('input.txt').read_text() == 'large':
        # what multitab.memwatch logs in a stage (stages/_common.py), then the OOM killer's SIGKILL
        logging.basicConfig(level=logging.INFO, format='[data] %(levelname)s %(name)s: %(message)s')
        logging.getLogger('multitab.memwatch').info('peak resident memory 7.5 GB')
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_stage_is_reported_as_memory_and_its_output_comes_back(tmp_path: Path) -> None:
    stage = write_stage("data", ["input.txt"], extra=KILLED)
    root = make_project(tmp_path / "p", {"data": stage})
    (root / "input.txt").write_text("small")
    run_dvc(["repro", "data"], root)
    before, lock = (root / "out" / "data").read_text(), (root / "dvc.lock").read_text()

    (root / "input.txt").write_text("large")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).resolve().parents[1] / "src")])}
    rc, lines = stream_command([sys.executable, "-m", "multitab.process", "repro", "--single-item", "data"],
                               str(root), env, logging.getLogger("test"))
    code = exit_code(lines, rc)
    line = cause(lines, code)
    assert code in (-9, 137), lines
    assert line.startswith("killed by SIGKILL: probably out of memory"), line
    assert "it had reached 7.5 GB of this machine's" in line and "orchestration.workers: 1" in line
    assert "`dvc checkout data` restores them" in line

    # DVC removed the output before running the command; the failed run left dvc.lock as it was
    assert not (root / "out" / "data").exists() and (root / "dvc.lock").read_text() == lock
    run_dvc(["checkout", "data"], root)
    assert (root / "out" / "data").read_text() == before


def test_the_peak_is_logged_as_it_grows() -> None:
    code = (
        "import logging, time; logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')\n"
        "from multitab.memwatch import watch_memory\n"
        "watch_memory(step_gb=0.01, interval_seconds=0.05); time.sleep(0.3)\n"
        "block = b'x' * (300 * 1024**2); time.sleep(0.5)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    peaks = [float(m.group(1)) for m in memwatch.PEAK_LINE.finditer(out)]
    assert len(peaks) >= 2 and peaks[-1] - peaks[0] >= 0.25, out  # logged again once 300 MB more were held
