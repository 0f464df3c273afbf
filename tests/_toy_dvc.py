"""Toy DVC projects for the pipeline tests: git init + dvc init in a folder, stages from small scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import yaml

_SRC = Path(__file__).resolve().parents[1] / "src"


def run_dvc(args: list[str], cwd: Path) -> str:
    """`dvc ARGS` in a copied project at `cwd` (its stages import the copy, then the repo's src/); fails the
    test with DVC's output when it fails."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(_SRC)])
    r = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"dvc {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout

PY = sys.executable

ORCHESTRATION = {
    "workers": 4,
    "retries": 2,
    "retry_delay_seconds": 0.2,
    "gpu_concurrency": None,
    "gpu_stages": ["train"],
    "lock_retries": 20,
    "schedule": "0 3 * * *",
    "timezone": "UTC",
    "summary": "results/pipeline_summary.json",
    "sync_remote": False,
    "max_train_stages": 2000,
    "memory_budget_gb": None,
    "stage_memory": "results/stage_memory.json",
    "stage_server": True,
}


def make_project(root: Path, stages: dict[str, dict]) -> Path:
    """A git + DVC project in `root` with the given dvc.yaml stages and an `orchestration:` section."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "scripts").mkdir()
    for name, stage in stages.items():
        if "_script" in stage:
            (root / "scripts" / f"{name}.py").write_text(stage.pop("_script"))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=root, check=True, env=env)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestration": ORCHESTRATION}, sort_keys=False))
    return root


def dvc_status(root: Path) -> dict:
    out = subprocess.run(
        [PY, "-m", "dvc", "status", "--json"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out or "{}")


def write_stage(name: str, deps: Sequence[str] = (), extra: str = "") -> dict:
    """A stage whose script (scripts/<name>.py, a dep) runs `extra`, then writes its deps' text plus its
    name to out/<name>. make_project writes the script from the `_script` key."""
    lines = [
        "import pathlib",
        textwrap.dedent(extra).strip(),
        f"text = ''.join(pathlib.Path(d).read_text() for d in {list(deps)!r}) + {name + chr(10)!r}",
        "pathlib.Path('out').mkdir(exist_ok=True)",
        f"pathlib.Path('out/{name}').write_text(text)",
    ]
    script = f"scripts/{name}.py"
    # `python` is the flow's interpreter: the flow puts its venv first on PATH.
    return {
        "cmd": f"python {script}",
        "deps": [script, *deps],
        "outs": [f"out/{name}"],
        "_script": "\n".join(lines),
    }


def repo_dvc_yaml(names: Sequence[str], params: dict | None = None) -> dict:
    """The repository's dvc.yaml with only the stages `names` (as written there, `vars` included); with `params`
    (a small project's params.yaml), the `runs` stage tracks only the sections it has (DVC refuses a missing one)."""
    full = yaml.safe_load((_SRC.parent / "dvc.yaml").read_text())
    stages = {k: full["stages"][k] for k in names}
    if params is not None and "runs" in stages:
        stages["runs"]["params"] = [k for k in stages["runs"]["params"] if k.split(".")[0] in params]
    return {"vars": full["vars"], "stages": stages}


def write_runs_file(root: Path) -> None:
    """runs.yaml of `root`'s params.yaml (as `make repro` writes it before DVC reads dvc.yaml)."""
    from multitab.config import load_params
    from multitab.runs.document import render
    from multitab.runs.types import RUNS_FILE

    (root / RUNS_FILE).write_text(render(load_params(root / "params.yaml")))


REAL_TRAIN_STAGE = "train@real-higgs-stl_mlp-0"


def real_train_project(repo: Path) -> str:
    """A git + DVC project in `repo` holding the repository's own `train` stage (as dvc.yaml writes it), its
    code and hyperparameter files, one run (higgs x stl_mlp x seed 0, one epoch, CPU) and a tiny processed
    split with a passing validation verdict; returns the stage's name."""
    from _training_tiny import write_tiny_processed

    root = _SRC.parent
    repo.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__")
    for item in ("stages", "src", "hparams"):  # hparams/: the runs' hyperparameter files
        shutil.copytree(root / item, repo / item, ignore=ignore, symlinks=True)
    (repo / ".gitignore").write_text((root / ".gitignore").read_text())
    (repo / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(["train"]), sort_keys=False))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"].update(device="cpu", max_epochs=1, max_train_rows=None, progress=False, num_threads=1)
    params["runs"] = {"real": {"data": {"datasets": ["higgs"]}, "models": ["stl_mlp"], "seeds": [0], "train": {}}}
    del params["study"], params["attribution"]  # their run groups are replaced
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_runs_file(repo)
    write_tiny_processed(repo / "data" / "processed" / "higgs", n={"train": 300, "val": 100, "test": 100})
    verdict = repo / "data" / "validated" / "higgs.json"
    verdict.parent.mkdir(parents=True)
    verdict.write_text(json.dumps({"success": True}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)  # dvclive reads HEAD
    return REAL_TRAIN_STAGE
