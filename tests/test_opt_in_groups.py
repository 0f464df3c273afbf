"""Plain `dvc repro` covers exactly what `make repro` runs: the opt-in run groups (the study, the sweeps)
are in dvc.yaml's DAG only while runs.yaml holds them (`make study`, `make sweep`: flows.pipeline --groups)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from _toy_dvc import repo_dvc_yaml
from _training_tiny import TINY_TRAIN, write_tiny_hparams, write_tiny_processed
from flows.dag import read_stage_graph, select, sync_runs_file

ROOT = Path(__file__).resolve().parents[1]


def _dvc(root: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "DVC_NO_UPDATER": "1",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"dvc {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def _project(root: Path) -> Path:
    """The repository's training, study and sweep stages (dvc.yaml as written there) over params with a
    default group (STL on a tiny dataset), the opt-in study group and an opt-in sweep group."""
    root.mkdir()
    for folder in ("stages", "src/multitab"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "hparams", root / "hparams")  # the authors' files (the study's: multitab_bench)
    write_tiny_hparams(root, ["stl_mlp"])  # and the tiny dataset's
    names = ["runs", "train", "synthesize", "validate_synthetic", "group_report", "sweep_select"]
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    params = {
        "protocol": "paper",
        "bench": {**raw["bench"], "configs": {"p06_pd3_t3": raw["bench"]["configs"]["p06_pd3_t3"]}},
        "study": {**raw["study"], "configs": ["p06_pd3_t3"]},
        "train": {**TINY_TRAIN, "max_epochs": 1, "device": "cpu", "optim": {}},
        "runs": {
            "real": {"data": {"datasets": ["tiny"]}, "models": ["stl_mlp"], "seeds": [0], "train": {}},
            "study": {**raw["runs"]["study"], "seeds": [0]},
            "sweep_mlp": {**raw["runs"]["sweep_mlp"], "data": {"datasets": ["tiny"]}, "models": ["stl_mlp"],
                          "grid": {"lr": [0.001], "dropout": [0.0, 0.1]}},
        },
        "orchestration": raw["orchestration"],
        "validation": raw["validation"],  # the MultiTab-Bench folder's verdict (validate_synthetic) tracks it
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(names, params), sort_keys=False))
    write_tiny_processed(root / "data" / "processed" / "tiny", n={"train": 200, "val": 100, "test": 100})
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / "tiny.json").write_text(json.dumps({"success": True}))
    sync_runs_file(root)  # what make repro writes
    # the default DAG's MultiTab-Bench folder (synthesize@p06_pd3_t3, validate_synthetic@p06_pd3_t3), up to date
    (root / "data" / "synthetic" / "p06_pd3_t3").mkdir(parents=True)
    (root / "data" / "synthetic" / "p06_pd3_t3" / "meta.json").write_text("{}")
    (root / "data" / "validated" / "synthetic").mkdir()
    (root / "data" / "validated" / "synthetic" / "p06_pd3_t3.json").write_text(json.dumps({"success": True}))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    _dvc(root, "init", "-q")
    _dvc(root, "commit", "-f", "synthesize@p06_pd3_t3", "validate_synthetic@p06_pd3_t3")
    subprocess.run([*git, "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=root, check=True, env=env)  # dvclive reads HEAD
    return root


def test_plain_dvc_repro_runs_only_the_default_dag_and_the_opt_in_groups_are_reached_by_name(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    out = _dvc(root, "repro")
    assert "Running stage 'train@real-tiny-stl_mlp-0'" in out
    assert "study" not in out and "sweep" not in out  # no study data, run or report; no grid point
    assert (root / "results" / "runs" / "tiny" / "stl_mlp" / "seed0" / "metrics.json").is_file()
    # the default DAG is up to date: plain `dvc status` lists no stage and `dvc repro` runs nothing
    assert json.loads(_dvc(root, "status", "--json") or "{}") == {}
    assert "Running stage" not in _dvc(root, "repro")
    # `make study` (flows.pipeline --groups study --targets 'group_report@study*') reaches the study's stages ...
    sync_runs_file(root, groups=["study"])
    study = select(read_stage_graph(root), ["group_report@study*"]).order
    assert {"synthesize@study-p06_pd3_t3", "validate_synthetic@study-p06_pd3_t3", "train@study-p06_pd3_t3-mmoe-0",
            "group_report@study"} <= set(study)
    assert not [s for s in study if "sweep" in s or s.startswith("train@real")]
    # ... `make sweep` (--groups 'sweep_*' --targets sweep_select) the grid points and the selection
    sync_runs_file(root, groups=["sweep_*"])
    sweep = select(read_stage_graph(root), ["sweep_select"]).order
    assert set(sweep) == {"runs", "train@sweep_mlp-tiny-stl_mlp-lr0_001-dropout0_0-0",
                          "train@sweep_mlp-tiny-stl_mlp-lr0_001-dropout0_1-0", "sweep_select@sweeps"}
    # and `make repro` takes them out again: plain DVC is back to the up-to-date default
    sync_runs_file(root)
    assert json.loads(_dvc(root, "status", "--json") or "{}") == {}


def test_makefile_targets_name_their_groups() -> None:
    text = (ROOT / "Makefile").read_text()
    assert "flows.pipeline --groups study --targets 'group_report@study*'" in text
    assert "flows.pipeline --groups attribution --targets group_report@attribution" in text
    assert "flows.pipeline --groups 'sweep_*' --targets sweep_select" in text


def test_two_dvc_experiments_differing_in_one_param_show_side_by_side(tmp_path: Path) -> None:
    """DVC's own experiment machinery on the repository's stages: `dvc exp run -S <param>` twice, then
    `dvc exp show --json` holds both runs' params and metrics (the `runs` stage writes the runs' records into
    runs.yaml again, and the train stage, tracking its record, re-runs)."""
    root = _project(tmp_path / "p")
    for epochs in (1, 2):
        out = _dvc(root, "exp", "run", "-n", f"epochs{epochs}", "-S", f"train.max_epochs={epochs}")
        assert "train@real-tiny-stl_mlp-0" in out
    shown = json.loads(_dvc(root, "exp", "show", "--json"))
    seen = {}
    for commit in shown:
        for exp in commit.get("experiments") or []:
            for rev in exp.get("revs") or []:
                data = rev.get("data") or {}
                metrics = (data.get("metrics", {}).get("results/runs/tiny/stl_mlp/seed0/metrics.json", {})
                           .get("data", {}))
                params = data.get("params", {}).get("params.yaml", {}).get("data", {})
                if metrics:
                    seen[rev.get("name") or exp.get("name")] = (params["train"]["max_epochs"], metrics["epochs"])
    assert seen == {"epochs1": (1, 1), "epochs2": (2, 2)}, seen
