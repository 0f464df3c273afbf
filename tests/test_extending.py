"""docs/extending.md cannot rot: in a copy of the repository, a toy model is added the way the page says
(its class, its line in the registry, its hyperparameter file) and a run group that trains it is a
params.yaml change only; `dvc repro` then trains the new run through the repository's own `train` stage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from _toy_dvc import repo_dvc_yaml
from _training_tiny import write_tiny_processed

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
    _edit(root / "src" / "multitab" / "names.py", '    "xgboost": "multitab.models.xgboost_model:XGBoost",\n',
          '    "xgboost": "multitab.models.xgboost_model:XGBoost",\n    "toy": "multitab.models.toy:Toy",\n')
    (root / "hparams" / "authors" / "higgs" / "toy.yaml").write_text(
        "model: {width: 8}\noptim: {optimizer: adam, lr: 0.01, weight_decay: 0.0, max_epochs: 10}\n")
    # A run group: params.yaml only
    _edit(root / "params.yaml", "\nruns:\n", "\nruns:\n  toy_group:\n    data: {datasets: [higgs]}\n"
          "    models: [toy, stl_mlp]\n    seeds: [0]\n    train: {max_epochs: 1, max_train_rows: null, batch_size: 64}\n"
          "    out: results/toy_runs\n    checkpoints: results/toy_checkpoints\n")
    after = {p.relative_to(root) for p in root.rglob("*") if p.is_file() and before.get(p.relative_to(root)) != p.read_bytes()}
    assert after == {Path("src/multitab/models/toy.py"), Path("src/multitab/names.py"),
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
