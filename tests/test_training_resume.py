"""A run SIGKILLed mid-epoch and re-run ends with bit-identical metrics (CPU, deterministic settings)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from _training_tiny import write_tiny_processed

WORKER = Path(__file__).parent / "_training_worker.py"
ROOT = Path(__file__).resolve().parents[1]
TIMING = {"epoch_seconds", "data_seconds", "samples_per_second", "train_seconds", "resumed_from_epoch"}


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run([sys.executable, str(WORKER), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in TIMING}


def test_sigkilled_run_resumes_bit_identically(tmp_path: Path) -> None:
    data = tmp_path / "tiny"
    write_tiny_processed(data)
    full = _run(data, tmp_path / "ck_full", tmp_path / "full.json")
    assert full.returncode == 0, full.stderr
    killed = _run(data, tmp_path / "ck_kill", tmp_path / "kill.json", 2, 3)  # mid-epoch 3 of 5
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "kill.json").exists()
    assert torch.load(tmp_path / "ck_kill" / "last.pt", weights_only=True)["epoch"] == 2
    resumed = _run(data, tmp_path / "ck_kill", tmp_path / "kill.json")
    assert resumed.returncode == 0, resumed.stderr
    a = json.loads((tmp_path / "full.json").read_text())
    b = json.loads((tmp_path / "kill.json").read_text())
    assert b["record"]["resumed_from_epoch"] == 2 and a["record"]["resumed_from_epoch"] == 0
    assert _strip(a["record"]) == _strip(b["record"])  # float equality of every metric: bit for bit
    assert [_strip(r) for r in a["history"]] == [_strip(r) for r in b["history"]]
    sd_a = torch.load(tmp_path / "ck_full" / "best.pt", weights_only=True)["model"]
    sd_b = torch.load(tmp_path / "ck_kill" / "best.pt", weights_only=True)["model"]
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
