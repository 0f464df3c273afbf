"""A user's own multitask table, declared in params.yaml only, through `dvc repro aggregate` of the repository's own
dvc.yaml: its data stages, its runs (trained with the recipes), its rows in the report and the entry page, and no
tracked file but params.yaml and the generated runs.yaml changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WINE = Path(__file__).parent / "fixtures" / "wine_quality"

DECLARED = """datasets:
  wine:
    source: local
    local: {path: local/wine}
    tasks: {"type/colour": binary, quality: multiclass}
    split: {method: shuffle, seed: 0, val_fraction: 0.15, test_fraction: 0.15}
"""


def _small_project(root: Path) -> None:
    """The repository's code, hyperparameter files and dvc.yaml with a params.yaml made small: no dataset yet, one run
    group of two models for one epoch, one MultiTab-Bench configuration of a few rows, no study."""
    for folder in ("stages", "src/multitab", "hparams", "gx"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "uncommitted"))
    shutil.copy(ROOT / "icl.lock", root / "icl.lock")
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section in ("study", "attribution"):
        p.pop(section)
    p["datasets"] = {}
    # validation.processed as shipped: 168 training rows are judged by what 10 quantiles give
    p["validation"]["policy"] = {}
    p["bench"]["configs"] = {"p06_pd3_t3": p["bench"]["configs"]["p06_pd3_t3"]}
    p["bench"]["data"]["n_samples"] = 300
    p["bench"]["label_correlations"].update(n_datasets=2, n_samples=200)
    p["train"]["patience"] = {"default": 5}
    p["runs"] = {"real": {"data": "datasets", "models": ["stl_mlp", "mmoe"], "seeds": [0],
                          "train": {"max_epochs": 1, "max_train_rows": None, "batch_size": 64}}}
    p["aggregate"].update(models=["stl_mlp", "mmoe"], ablation=[], figures={"models": ["mmoe"], "dpi": 50},
                          significance={**p["aggregate"]["significance"], "model": "mmoe", "baselines": ["stl_mlp"]})
    p["icl"]["datasets"] = []
    (root / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    for stage in ("runs", "aggregate"):  # DVC refuses a params key the project does not have
        dvc["stages"][stage]["params"] = [k for k in dvc["stages"][stage]["params"] if k.split(".")[0] in p]
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc, sort_keys=False))


@pytest.mark.slow  # the whole DAG to aggregate: about a minute on 2 cores
def test_a_table_declared_in_params_only_runs_through_dvc_repro_to_the_report(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    _small_project(root)
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
           "DVC_NO_UPDATER": "1", "GX_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> str:
        r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout + r.stderr

    run(sys.executable, "-m", "multitab.runs")
    run("git", "init", "-q")
    run(sys.executable, "-m", "dvc", "init", "-q")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm", "init")

    # The user's part: the file copied into local/ (its column `type` spelt `type/colour`: a name that is no path),
    # the entry in params.yaml
    shutil.copytree(WINE, root / "local" / "wine")
    data = root / "local" / "wine" / "data.csv"
    data.write_text(data.read_text().replace("type,", "type/colour,", 1))
    text = (root / "params.yaml").read_text()
    assert "datasets: {}\n" in text
    (root / "params.yaml").write_text(text.replace("datasets: {}\n", DECLARED))

    run(sys.executable, "-m", "multitab.runs")  # what make repro does before DVC reads dvc.yaml
    out = run(sys.executable, "-m", "dvc", "repro", "aggregate")
    for stage in ("acquire_declared@wine", "split@wine", "validate_raw_declared@wine", "preprocess_declared@wine",
                  "validate_processed@wine", "train@real-wine-stl_mlp-0", "train@real-wine-mmoe-0", "aggregate"):
        assert f"Running stage '{stage}'" in out, stage
    metrics = yaml.safe_load((root / "results" / "runs" / "wine" / "mmoe" / "seed0" / "metrics.json").read_text())
    assert metrics["hparams"]["file"] == "hparams/recipe/mmoe.yaml"
    assert set(metrics["test"]) == {"type/colour", "quality"}
    curves = root / "results" / "runs" / "wine" / "mmoe" / "seed0" / "dvclive" / "plots" / "metrics"
    assert (curves / "val_type\u2215colour.tsv").is_file() and not (curves / "val_type").exists()
    report = (root / "results" / "report.md").read_text()
    assert "| wine | real (local file) |" in report
    assert "wine type/colour AUC" in report and "wine quality AUC" in report
    assert "## Table 5: wine" in report and (root / "results" / "tables" / "table5_wine_std.csv").is_file()
    assert "wine" in (root / "results" / "index.html").read_text()
    validation = (root / "reports" / "validation" / "index.html").read_text()
    assert "what was inferred" in validation and "<td>quality</td><td>task</td><td>multiclass</td>" in validation

    status = run("git", "status", "--porcelain", "--untracked-files=no").split()
    assert sorted(status) == ["M", "M", "params.yaml", "runs.yaml"], status
