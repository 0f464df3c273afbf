"""A user's own model through DVC: its package is a dependency of its train stages alone (runs.yaml's `model_code`,
which dvc.yaml's `train` and `train_stack` list as `"${item.model_code}"`), so an edit of its source re-runs
exactly its runs; and (slow) the example entered into a copy of the repository by params.yaml alone runs through
`dvc repro aggregate` into Table 3 and the complexity table, leaving params.yaml, runs.yaml and dvc.lock changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from _own_model import EXAMPLE, ROOT, declaration, packages_on_path, project
from multitab.runs.cli import main as runs_main

MODEL_CODE = '"${item.model_code}"'  # the line dvc.yaml's train and train_stack deps take (runs.yaml)
FAKE_TRAIN = """import json, pathlib, sys
entry = __import__("yaml").safe_load(pathlib.Path("runs.yaml").read_text())["train_runs"][sys.argv[1]]
out = pathlib.Path(entry["out"])
out.mkdir(parents=True, exist_ok=True)
(out / "metrics.json").write_text(json.dumps({"run": sys.argv[1]}))
"""

# the repository's train stage, reduced to what decides which stages re-run: its command, the run's hyperparameter
# file and its model's source as deps, its record as params
TOY_DVC = f"""vars: [runs.yaml]
stages:
  train:
    foreach: ${{train_runs}}
    do:
      cmd: python scripts/train.py ${{key}}
      deps: [scripts/train.py, "${{item.hparams_file}}", {MODEL_CODE}]
      params: [{{runs.yaml: ["train_runs.${{key}}.hparams", "train_runs.${{key}}.train"]}}]
      outs: ["${{item.out}}/metrics.json"]
"""


@pytest.fixture(autouse=True)
def own_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    yield from packages_on_path(monkeypatch, tmp_path)


def _env(*path: Path) -> dict[str, str]:
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
            "DVC_NO_UPDATER": "1", "GX_ANALYTICS_ENABLED": "false",
            "PYTHONPATH": os.pathsep.join(str(p) for p in path),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _run(root: Path, env: dict[str, str], *args: str, timeout: int = 600) -> str:
    r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def _commit(root: Path, env: dict[str, str]) -> None:
    _run(root, env, "git", "add", "-A")
    _run(root, env, "git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm",
         "init")


def test_editing_its_source_reruns_exactly_its_train_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = project(tmp_path, {"two_expert": declaration()}, ["stl_mlp", "two_expert"])
    root = params.parent
    raw = yaml.safe_load(params.read_text())
    raw["runs"]["real"]["seeds"] = [0, 1]
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    shutil.copytree(EXAMPLE / "own_model", root / "own" / "own_model")  # the user's package, in the project
    monkeypatch.syspath_prepend(str(root / "own"))
    (root / "src" / "multitab" / "models").mkdir(parents=True)  # the registry's models' source (a stand-in)
    (root / "src" / "multitab" / "models" / "mmoe.py").write_text("# the registry's\n")
    (root / "scripts").mkdir()
    (root / "scripts" / "train.py").write_text(FAKE_TRAIN)
    (root / "dvc.yaml").write_text(TOY_DVC)
    assert runs_main(["--params", str(params), "--out", str(root / "runs.yaml")]) == 0
    entry = yaml.safe_load((root / "runs.yaml").read_text())["train_runs"]["real-acs_income-two_expert-0"]
    assert entry["model_code"] == "own/own_model"
    env = _env(ROOT / "src")
    _run(root, env, "git", "init", "-q")
    _run(root, env, sys.executable, "-m", "dvc", "init", "-q")
    _commit(root, env)
    _run(root, env, sys.executable, "-m", "dvc", "repro")
    assert _status(root, env) == {}

    nets = root / "own" / "own_model" / "nets.py"
    nets.write_text(nets.read_text().replace("two experts", "two experts (edited)"))
    assert sorted(_status(root, env)) == ["train@real-acs_income-two_expert-0", "train@real-acs_income-two_expert-1"]


def _status(root: Path, env: dict[str, str]) -> dict[str, object]:
    import json

    return json.loads(_run(root, env, sys.executable, "-m", "dvc", "status", "--json") or "{}")


# ------------------------------------------------------------------------------------------ the whole pipeline
def small_project(root: Path) -> None:
    """The repository's code, hyperparameter files and dvc.yaml (train and train_stack depending on the model's
    source: MODEL_CODE) with a params.yaml made small: the three paper datasets' stand-ins, two of the paper's
    models (stl_mlp, mmoe) for one epoch on 2,048 rows, one MultiTab-Bench configuration of a few rows, no study."""
    for folder in ("stages", "src/multitab", "hparams", "gx", "local"):  # local/: the paper datasets' (empty) folders
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "uncommitted"))
    shutil.copy(ROOT / "icl.lock", root / "icl.lock")
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")  # the stages' outputs stay out of git, as in the repository
    shutil.copytree(EXAMPLE, root / "examples" / "own_model", ignore=shutil.ignore_patterns("__pycache__"))
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section in ("study", "attribution"):
        p.pop(section)
    p["validation"]["processed"].update(normal_mean_tolerance=0.5, normal_std_low=0.3, normal_std_high=2.0)
    p["bench"]["configs"] = {"p06_pd3_t3": p["bench"]["configs"]["p06_pd3_t3"]}
    p["bench"]["data"]["n_samples"] = 300
    p["bench"]["label_correlations"].update(n_datasets=2, n_samples=200)
    p["train"].update(max_epochs=1, max_train_rows=2048, batch_size=256, device="cpu")  # the stand-ins' first rows
    p["runs"] = {"real": {"data": "datasets", "models": ["stl_mlp", "mmoe"], "seeds": [0], "train": {}},
                 "bench": {"data": "bench", "models": ["stl_mlp", "mmoe"], "seeds": [0], "train": {}}}
    p["aggregate"].update(models="all", ablation=[], figures={"models": ["mmoe"], "dpi": 50},
                          significance={**p["aggregate"]["significance"], "model": "mmoe", "baselines": ["stl_mlp"]})
    p["icl"]["datasets"] = []
    (root / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    dvc = (ROOT / "dvc.yaml").read_text()
    if not (ROOT / "src" / "multitab" / "runs.py").exists():  # dvc.yaml names the module runs/ replaced
        dvc = dvc.replace("src/multitab/runs.py", "src/multitab/runs/__init__.py")
    if MODEL_CODE not in dvc:  # the line this feature asks of dvc.yaml (in train's deps; train_stack's share them)
        dvc = dvc.replace('"${item.hparams_file}", "${item.data}"', f'"${{item.hparams_file}}", {MODEL_CODE}, '
                          '"${item.data}"', 1)
    dvc_yaml = yaml.safe_load(dvc)
    for stage in ("runs", "aggregate", "complexity"):
        if "models" not in dvc_yaml["stages"][stage]["params"]:  # what this feature asks of dvc.yaml: `models`
            dvc_yaml["stages"][stage]["params"].append("models")
        # DVC refuses a params key the project does not have
        dvc_yaml["stages"][stage]["params"] = [k for k in dvc_yaml["stages"][stage]["params"] if k.split(".")[0] in p]
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False).replace(
        "'${item.model_code}'", MODEL_CODE))


@pytest.mark.slow  # the whole DAG to aggregate, then the user's part: 15-25 min on the shared 2-core machine
@pytest.mark.timeout(5400)
def test_the_example_declared_in_params_only_reaches_table3_and_the_complexity_table(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    small_project(root)
    env = _env(root / "src", root, root / "examples" / "own_model")  # the example's folder on PYTHONPATH
    _run(root, env, sys.executable, "-m", "multitab.runs")
    _run(root, env, "git", "init", "-q")
    _run(root, env, sys.executable, "-m", "dvc", "init", "-q")
    _commit(root, env)
    _run(root, env, sys.executable, "-m", "dvc", "repro", "aggregate", timeout=3000)
    _commit(root, env)  # a clone with its dvc.lock, as the repository is

    # the user's part: params.yaml edited (the example's entry), nothing else
    entry = yaml.safe_load((EXAMPLE / "params_entry.yaml").read_text())
    text = (root / "params.yaml").read_text()
    assert "models: {}\n" in text
    tail = yaml.safe_dump({"models": entry["models"]}, sort_keys=False)
    groups = yaml.safe_dump(entry["runs"], sort_keys=False)
    text = text.replace("models: {}\n", tail).replace("\nruns:\n", "\nruns:\n" + "".join(
        f"  {line}\n" for line in groups.splitlines()), 1)
    (root / "params.yaml").write_text(text)
    out = _run(root, env, sys.executable, "-m", "multitab.models", "check", "two_expert")
    assert "keeps the model contract" in out
    _run(root, env, sys.executable, "-m", "multitab.runs")  # what make repro does before DVC reads dvc.yaml
    out = _run(root, env, sys.executable, "-m", "dvc", "repro", "aggregate", timeout=3000)
    trained = sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage 'train@"))
    assert trained == ["train@own_bench-p06_pd3_t3-two_expert-0", "train@own_real-acs_income-two_expert-0",
                       "train@own_real-aliexpress-two_expert-0", "train@own_real-higgs-two_expert-0"], out
    assert "Running stage 'complexity'" in out and "Running stage 'aggregate'" in out
    report = (root / "results" / "report.md").read_text()
    table3 = report.split("## Table 3")[1].split("\n## ")[0]
    table4 = report.split("## Table 4")[1].split("\n## ")[0]
    assert "| Two-expert MMoE (user) |" in table3 and "| Two-expert MMoE (user) |" in table4
    html = (root / "results" / "report.html").read_text()
    assert html.count("Two-expert MMoE (user)") >= 2
    status = _run(root, env, "git", "status", "--porcelain", "--untracked-files=no").split()
    assert sorted(status) == ["M", "M", "M", "dvc.lock", "params.yaml", "runs.yaml"], status
