"""`train.stack_seeds`: a group's seeds of one dataset x model train as one stacked model in one stage
(train_stack@<group>-<dataset>-<model>), each seed's files as its own run writes them; a model that cannot
stack trains its seeds one after another; the repository's stage runs through `dvc repro`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _toy_dvc import repo_dvc_yaml
from _training_tiny import write_tiny_processed, write_tiny_project
from multitab.config import load_params
from multitab.runs.document import document
from multitab.runs.expand import expand, stacked
from multitab.runs.types import STACKS
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]
REGRESSION = [{"name": "y1", "type": "regression", "n_classes": None},
              {"name": "y2", "type": "regression", "n_classes": None}]


def _project(root: Path, *, stack: bool, models: list[str]) -> Path:
    processed = root / "data" / "processed" / "tiny"
    write_tiny_processed(processed, n={"train": 300, "val": 100, "test": 100}, tasks=REGRESSION)
    groups = {"real": {"data": {"datasets": ["tiny"]}, "models": models, "seeds": [0, 1],
                       "train": {"stack_seeds": stack}}}
    return write_tiny_project(root, train={"max_epochs": 2, "batch_size": 64}, groups=groups,
                              extra={"protocol": "paper"})


def test_stacked_groups_expand_to_one_stack_per_dataset_and_model(tmp_path: Path) -> None:
    params = load_params(_project(tmp_path, stack=True, models=["stl_mlp", "xgboost"]))
    alone, stacks = stacked(params, expand(params))
    assert alone == {} and list(stacks) == ["real-tiny-stl_mlp", "real-tiny-xgboost"]
    s = stacks["real-tiny-stl_mlp"]
    assert s.seeds == (0, 1) and s.out == "results/runs/tiny/stl_mlp"
    assert s.checkpoints == "results/checkpoints/tiny/stl_mlp"
    assert [m.key for m in s.members()] == ["real-tiny-stl_mlp-0", "real-tiny-stl_mlp-1"]
    assert [m.out for m in s.members()] == ["results/runs/tiny/stl_mlp/seed0", "results/runs/tiny/stl_mlp/seed1"]
    doc = document(params)
    assert doc["train_runs"] == {} and set(doc[STACKS]) == set(stacks)
    # the repository's own params declare no stacked group
    assert document(load_params(ROOT / "params.yaml"))[STACKS] == {}


def test_a_stack_stage_writes_what_the_separate_runs_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from stages import train as stage

    stacked_params = _project(tmp_path / "stacked", stack=True, models=["stl_mlp", "xgboost"])
    alone_params = _project(tmp_path / "alone", stack=False, models=["stl_mlp", "xgboost"])
    assert stage.main(["--stack", "real-tiny-stl_mlp", "--params", str(stacked_params)]) == 0
    assert stage.main(["--stack", "real-tiny-xgboost", "--params", str(stacked_params)]) == 0
    assert "real-tiny-xgboost: not stacked (XGBoost is not a torch module" in caplog.text
    for seed in (0, 1):
        for model in ("stl_mlp", "xgboost"):
            assert stage.main(["--run", f"real-tiny-{model}-{seed}", "--params", str(alone_params)]) == 0
        one = json.loads((tmp_path / "stacked/results/runs/tiny/stl_mlp" / f"seed{seed}/metrics.json").read_text())
        ref = json.loads((tmp_path / "alone/results/runs/tiny/stl_mlp" / f"seed{seed}/metrics.json").read_text())
        assert one["stacked"] == [0, 1] and ref["stacked"] is None and one["seed"] == seed
        # equal up to float rounding (tests/test_training_stacked.py: batch norm models, relative 1e-2)
        for task, value in ref["test"].items():
            assert one["test"][task] == pytest.approx(value, rel=1e-2, abs=1e-4)
        assert one["best_epoch"] == ref["best_epoch"] and one["epochs"] == ref["epochs"]
        assert one["params"]["train"]["stack_seeds"] is True and ref["params"]["train"]["stack_seeds"] is False
        assert (tmp_path / "stacked/results/checkpoints/tiny/stl_mlp" / f"seed{seed}/best.pt").is_file()
        assert (tmp_path / "stacked/results/runs/tiny/stl_mlp" / f"seed{seed}/dvclive/plots/metrics").is_dir()
        # XGBoost cannot stack: its seeds trained one after another, exactly as alone
        xa = json.loads((tmp_path / "stacked/results/runs/tiny/xgboost" / f"seed{seed}/metrics.json").read_text())
        xb = json.loads((tmp_path / "alone/results/runs/tiny/xgboost" / f"seed{seed}/metrics.json").read_text())
        assert xa["stacked"] is None and xa["test"] == xb["test"]
    # a run of a stacked group is not a stage of its own, and a stack key that does not exist is bad input
    assert stage.main(["--run", "real-tiny-stl_mlp-0", "--params", str(stacked_params)]) == BAD_INPUT
    assert "trains in a stack" in capsys.readouterr().err
    assert stage.main(["--stack", "real-tiny-nope", "--params", str(stacked_params)]) == BAD_INPUT


def test_the_repositorys_train_stack_stage_runs_through_dvc_repro(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    for folder in ("stages", "src/multitab"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(["train", "train_stack"]), sort_keys=False))
    _project(root, stack=True, models=["stl_mlp"])
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> str:
        r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout}\n{r.stderr}"
        return r.stdout + r.stderr

    run("git", "init", "-q")
    run(sys.executable, "-m", "dvc", "init", "-q")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm", "init")
    out = run(sys.executable, "-m", "dvc", "repro")
    assert "Running stage 'train_stack@real-tiny-stl_mlp'" in out and "train@" not in out
    for seed in (0, 1):
        record = json.loads((root / "results/runs/tiny/stl_mlp" / f"seed{seed}/metrics.json").read_text())
        assert record["stacked"] == [0, 1] and record["seed"] == seed
    assert json.loads(run(sys.executable, "-m", "dvc", "status", "--json")) == {}
