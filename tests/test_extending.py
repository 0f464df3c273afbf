"""docs/extending.md cannot rot: a toy model is added the way the page says (its class, its entry in the
registry, its hyperparameter file) and reaches Table 3 and the learning curves with nothing else changed; in a
copy of the repository a run group that trains it is a params.yaml change only, and `dvc repro` trains the new
run through the repository's own `train` stage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _aggregate_fakes import published_runs, write_run
from _toy_dvc import repo_dvc_yaml
from _training_tiny import write_tiny_processed
from multitab.config import load_params
from multitab.registry import REGISTRY, ModelEntry

ROOT = Path(__file__).resolve().parents[1]

TOY = textwrap.dedent('''
    """A toy model: one linear head per task over the numerical features."""

    from __future__ import annotations

    from typing import Any

    import torch
    from torch import nn

    from multitab.models.base import MultitaskModel


    class Toy(MultitaskModel):
        """A toy model: one linear layer and a head per task.

        Shape:
            x_num (B, n_num) float32 and x_cat (B, n_cat) int64 in; {task: (B,) or (B, C)} out.

        Examples:
            >>> Toy  # doctest: +ELLIPSIS
            <class '...Toy'>
        """

        def __init__(self, *, schema: Any, width: int = 4) -> None:
            super().__init__(schema=schema)
            self.body = nn.Linear(schema.n_num, width)
            self.head = nn.Linear(width, sum(self.d_out))

        def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> dict[str, torch.Tensor]:
            return self.split_outputs(self.head(torch.relu(self.body(x_num))))
''')


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found (docs/extending.md's step changed?)"
    path.write_text(text.replace(old, new, 1))


def test_a_toy_model_and_a_toy_run_group_run_through_dvc_repro(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    for folder in ("stages", "src/multitab", "hparams"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    (root / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(["train"]), sort_keys=False))
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    # A model: its class, its line in the registry, its hyperparameter file (docs/extending.md)
    (root / "src" / "multitab" / "models" / "toy.py").write_text(TOY)
    xgboost = '    "xgboost": ModelEntry("multitab.models.xgboost_model:XGBoost", "XGB", epochs=False),\n'
    _edit(root / "src" / "multitab" / "registry.py", xgboost,
          xgboost + '    "toy": ModelEntry("multitab.models.toy:Toy", "Toy", {"width": 4}),\n')
    (root / "hparams" / "authors" / "higgs" / "toy.yaml").write_text(
        "model: {width: 8}\noptim: {optimizer: adam, lr: 0.01, weight_decay: 0.0, max_epochs: 10}\n")
    # A run group: params.yaml only
    _edit(root / "params.yaml", "\nruns:\n", "\nruns:\n  toy_group:\n    data: {datasets: [higgs]}\n"
          "    models: [toy, stl_mlp]\n    seeds: [0]\n"
          "    train: {max_epochs: 1, max_train_rows: null, batch_size: 64}\n"
          "    out: results/toy_runs\n    checkpoints: results/toy_checkpoints\n")
    after = {p.relative_to(root) for p in root.rglob("*")
             if p.is_file() and before.get(p.relative_to(root)) != p.read_bytes()}
    assert after == {Path("src/multitab/models/toy.py"), Path("src/multitab/registry.py"),
                     Path("hparams/authors/higgs/toy.yaml"), Path("params.yaml")}

    # its data (a processed dataset and its verdict, as the pipeline's stages write them)
    # (a tiny stand-in in its place: the stage trains whatever processed folder the run names)
    write_tiny_processed(root / "data" / "processed" / "higgs", n={"train": 200, "val": 100, "test": 100})
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / "higgs.json").write_text(json.dumps({"success": True}))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1",
           "DVC_NO_UPDATER": "1", "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str) -> str:
        r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout}\n{r.stderr}"
        return r.stdout + r.stderr

    run(sys.executable, "-m", "multitab.runs")  # what make repro does before DVC reads dvc.yaml
    run("git", "init", "-q")
    run(sys.executable, "-m", "dvc", "init", "-q")
    run("git", "add", "-A")
    run("git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-qm", "init")
    out = run(sys.executable, "-m", "dvc", "repro", "train@toy_group-higgs-toy-0", "train@toy_group-higgs-stl_mlp-0")
    assert "Running stage 'train@toy_group-higgs-toy-0'" in out
    for model in ("toy", "stl_mlp"):
        record = json.loads((root / "results" / "toy_runs" / "higgs" / model / "seed0" / "metrics.json").read_text())
        assert record["model"] == model and record["group"] == "toy_group" and record["epochs"] == 1
        assert record["hparams"]["file"] == f"hparams/authors/higgs/{model}.yaml"
        assert all(v is not None for v in record["test"].values())
    assert record["hparams"]["model"]["d_hidden"] == [256, 128, 64]  # the authors' Higgs STL file
    toy = json.loads((root / "results" / "toy_runs" / "higgs" / "toy" / "seed0" / "metrics.json").read_text())
    # the toy's file, with protocol `paper`'s optimiser laid over it (Adam, weight decay 1e-5)
    assert toy["hparams"]["model"] == {"width": 8} and toy["optimizer"] == {"optimizer": "adam", "lr": 0.01,
                                                                          "weight_decay": 1e-05}


def test_a_new_model_reaches_table3_and_the_learning_curves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its class, its registry entry and its hyperparameter file are all a model needs: the tables list every
    registered model (params.yaml's `aggregate.models: all`) under the registry's label, the curves too."""
    import torch

    from multitab.datasets.schema import get_schema
    from multitab.evaluation.paper.paper_tables import table3
    from multitab.evaluation.paper.published import load_published
    from multitab.evaluation.paper.report import Outputs, write_curves
    from multitab.evaluation.paper.results import PaperResults
    from multitab.evaluation.paper.runs import RunSet, load_runs
    from multitab.evaluation.tables import Cell
    from multitab.hparams import load
    from multitab.models import build_model

    # its class, in a module of its own; its entry in the registry; its hyperparameter file
    (tmp_path / "toy_registry_model.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, "toy", ModelEntry("toy_registry_model:Toy", "Toy", {"width": 4}))
    shutil.copytree(ROOT / "hparams" / "protocol", tmp_path / "hparams" / "protocol")
    (tmp_path / "hparams" / "authors" / "higgs").mkdir(parents=True)
    (tmp_path / "hparams" / "authors" / "higgs" / "toy.yaml").write_text(
        "model: {width: 8}\noptim: {optimizer: adam, lr: 0.01, weight_decay: 0.0, max_epochs: 10}\n")
    schema = get_schema("higgs")
    model = build_model("toy", schema, load("higgs", "toy", root=tmp_path).model)  # the class, by its entry
    assert model.body.out_features == 8 and set(model(torch.zeros(2, schema.n_num), torch.zeros(2, 0).long())) == {
        t.name for t in schema.tasks}

    # its runs as the train stage writes them, beside the paper's models' (Table 3's published means)
    runs = tmp_path / "runs"
    published_runs(runs, seeds=(0,), noise=0.0)
    for d in ("aliexpress", "acs_income", "higgs"):
        record = json.loads((runs / d / "mmoe" / "seed0" / "metrics.json").read_text())
        test = {t: v + 0.001 for t, v in record["test"].items()}
        write_run(runs, d, "toy", 0, test, record["task_types"], test_mse=record["test_mse"], curve=[0.5, 0.6])
    params = ROOT / "params.yaml"
    before = params.read_bytes()
    results = PaperResults(RunSet(load_runs(runs)), load_params(params).aggregate, load_published())

    t3 = table3(results)
    rows = [str(r[0]) for r in t3.rows]
    assert rows == ["STL", "MTL", "MMoE", "PLE", "TabT", "FT-T", "SAINT", "XGB", "STEM", "MultiTab-Net", "MAYA", "Toy"]
    toy, mmoe = t3.rows[-1], t3.rows[rows.index("MMoE")]
    for column, ours, theirs in zip(t3.header[1:], toy[1:], mmoe[1:]):
        assert isinstance(ours, Cell) and isinstance(theirs, Cell) and ours.value is not None, column
        assert ours.paper is None  # not a model of the paper: no published value beside it
        if not column.endswith("Δm"):  # a metric in percent: MMoE's + 0.1
            assert ours.value - theirs.value == pytest.approx(0.1), column  # type: ignore[operator]

    out = Outputs(tables=tmp_path / "t", figures=tmp_path / "f", plots=tmp_path / "p", report=tmp_path / "report.md",
                  metrics=tmp_path / "metrics.json")
    for folder in (out.tables, out.figures, out.plots):
        folder.mkdir()
    monkeypatch.setattr("multitab.evaluation.figures.save_figure", lambda *a, **k: [tmp_path / "f" / "c.png"])
    write_curves(results, runs, out)
    curve = pd.read_csv(out.plots / "learning_curves_val_mean.csv")
    toy_curve = curve[curve.model == "Toy"]
    assert sorted(toy_curve.dataset.unique()) == ["acs_income", "aliexpress", "higgs"]
    assert list(toy_curve[toy_curve.dataset == "higgs"].value) == pytest.approx([0.5, 0.6])
    assert "XGB" not in set(curve.model)  # boosting rounds: no curve (the registry's `epochs`)
    assert params.read_bytes() == before  # nothing else: params.yaml names no model for the tables
