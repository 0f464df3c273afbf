"""What every training run pays before and after it trains, kept small without changing a number: seeding does
not import torch's compiler (1.3 s a run), and the per-epoch curves are written with dvclive's own writer, without
opening the DVC repository (half a second a run), into the files `Live.log_metric` writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stages.train import write_dvclive

HISTORY = [{"epoch": 1, "train_loss": 0.5, "val_mean": 0.7, "val_a/b": 0.6, "epoch_seconds": 1.25},
           {"epoch": 2, "train_loss": 0.25, "val_mean": float("nan"), "val_a/b": 0.65, "epoch_seconds": 1.5}]


def test_seeding_sets_deterministic_kernels_without_importing_the_compiler() -> None:
    code = ("import sys, torch\nfrom multitab.training.device import seed_everything\n"
            "seed_everything(3, True)\nassert torch.are_deterministic_algorithms_enabled()\n"
            "print('torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)\n"
            "seed_everything(3, False)\nassert not torch.are_deterministic_algorithms_enabled()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_a_run_that_compiles_gives_the_compiler_the_kernels_determinism() -> None:
    code = ("import torch\nfrom multitab.training.device import compiler_determinism, seed_everything\n"
            "seed_everything(0, True)\ncompiler_determinism()\nimport torch._inductor.config as c\n"
            "assert c.deterministic is True\nseed_everything(0, False)\ncompiler_determinism()\n"
            "assert c.deterministic is False\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_curves_are_the_files_dvclive_live_writes(tmp_path: Path) -> None:
    write_dvclive(HISTORY, tmp_path / "ours")
    # the reference: dvclive's Live in a git repository of its own, logging the same values step by step
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "init"],
                   cwd=repo, check=True)
    code = ("from dvclive import Live\nfrom multitab.registry import file_key\nimport json, sys\n"
            "history = json.loads(sys.argv[1])\n"
            "with Live(dir='live', save_dvc_exp=False, dvcyaml=None, report=None) as live:\n"
            "    for row in history:\n"
            "        for k, v in row.items():\n"
            "            if k != 'epoch' and v is not None and v == v:\n"
            "                live.log_metric(file_key(k), float(v))\n"
            "        live.next_step()\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(HISTORY)], cwd=repo, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ours = {p.relative_to(tmp_path / "ours"): p.read_bytes() for p in (tmp_path / "ours").rglob("*.tsv")}
    theirs = {p.relative_to(repo / "live"): p.read_bytes() for p in (repo / "live").rglob("*.tsv")}
    assert ours == theirs and len(ours) == 4, (sorted(map(str, ours)), sorted(map(str, theirs)))
    assert not (tmp_path / "ours" / "metrics.json").exists()
