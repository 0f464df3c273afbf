"""Parameters / FLOPs per sample (the paper's Table 4 convention) and the complexity stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from _models_tiny import build_authors
from multitab.datasets.schema import get_schema
from multitab.evaluation.paper.complexity import PAPER_TABLE4, complexity, count_macs
from multitab.models import MODELS
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)
HIGGS = get_schema("higgs")


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.norm = nn.LayerNorm(4)
        self.act = nn.ReLU()
        self.out = nn.Linear(4, 1, bias=False)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.norm(self.lin(x_num))))


def test_ptflops_rules_on_standard_layers() -> None:
    macs = count_macs(_Tiny(), torch.randn(5, 3), torch.zeros(5, 0, dtype=torch.long))
    # Linear 5*3*4 + 4 (bias once, as ptflops); LayerNorm 20; ReLU 20; Linear 5*4*1
    assert macs == 5 * 3 * 4 + 4 + 20 + 20 + 5 * 4


def test_unknown_parametrised_module_raises() -> None:
    class Raw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3, 2))

        def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
            return x_num @ self.w

    with pytest.raises(ValueError, match="no counting rule"):
        count_macs(Raw(), torch.randn(2, 3), torch.zeros(2, 0, dtype=torch.long))


def test_per_task_models_sum_and_batch_dependence() -> None:
    ft = build_authors("ft_transformer", HIGGS)
    parts = [complexity(m, HIGGS)["flops"] for m in ft.models.values()]
    assert complexity(ft, HIGGS)["flops"] == pytest.approx(sum(parts))
    # per-sample cost: flat for per-sample models, growing with the batch under inter-sample attention
    mix = build_authors("multitab_net", HIGGS)  # per_sample_mixing
    att = build_authors("multitab_net", HIGGS, inter_sample="attention")
    assert complexity(mix, HIGGS, batch_size=64)["flops"] == pytest.approx(complexity(mix, HIGGS)["flops"], rel=0.01)
    # scores and weighted sum over the batch: + 2 (B - 1) D MACs per sample, D = 29 tokens x 16
    grown = complexity(att, HIGGS, batch_size=256)["macs"] - complexity(att, HIGGS)["macs"]
    assert grown == pytest.approx(2 * 255 * 464 + 4 * 255, rel=0.02)


# Table 4's MultiTab-Net figure is their single-token model (docs/deviations.md, "Reference figures"); SAINT's is
# their rotary module (parameters); the other models at their selected configuration.
TABLE4_CONFIG: dict[str, dict[str, Any]] = {
    "multitab_net": {"multi_token": False, "inter_sample": "attention"},
    "saint": {"inter_sample": "rope_attention"},
}


@pytest.mark.parametrize("name", sorted({m for m, d in PAPER_TABLE4 if d == "higgs"}))
def test_higgs_matches_paper_table4(name: str) -> None:
    if name not in MODELS:
        pytest.skip(f"{name} is not registered on this branch")
    paper_params, paper_flops = PAPER_TABLE4[(name, "higgs")]
    c = complexity(build_authors(name, HIGGS, **TABLE4_CONFIG.get(name, {})), HIGGS)
    assert c["params"] / 1e6 == pytest.approx(paper_params, rel=0.005, abs=0.005)
    # NOTE: our ptflops-rule count is 3.0-3.4% below Table 4 for the transformers (see the report)
    assert c["flops"] / 1e6 == pytest.approx(paper_flops, rel=0.04)


def test_complexity_stage_writes_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stages.complexity import main

    meta = {
        "dataset": "tiny",
        "features": [{"name": "x", "kind": "numerical", "cardinality": None}]
        + [{"name": "c", "kind": "categorical", "cardinality": 3}],
        "tasks": [{"name": "y", "type": "binary", "n_classes": None}],
        "standin": True,
    }
    (tmp_path / "processed" / "tiny").mkdir(parents=True)
    (tmp_path / "processed" / "tiny" / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "params.yaml").write_text("complexity: {batch_size: 1}\n")
    out = tmp_path / "tables" / "complexity"
    args = ["--params", str(tmp_path / "params.yaml"), "--out", str(out)]
    # every model is built from its hyperparameter file, else its recipe: neither here yet, one clear error naming it
    assert main([*args, "--processed", str(tmp_path / "processed")]) == BAD_INPUT
    assert "hparams/recipe/multitab_net.yaml: recipe not found" in capsys.readouterr().err
    shutil.copytree(ROOT / "hparams" / "authors" / "multitab_bench", tmp_path / "hparams" / "authors" / "tiny")
    shutil.copytree(ROOT / "hparams" / "protocol", tmp_path / "hparams" / "protocol")
    rc = main([*args, "--processed", str(tmp_path / "processed")])
    assert rc == 0
    df = pd.read_csv(out.with_suffix(".csv"))
    assert list(df["model"]) == list(MODELS) and (df["dataset"] == "tiny").all() and df["standin"].all()
    torch_rows = df[df["params"].notna()]
    assert (torch_rows["flops"] > 0).all()
    assert "stand-in data: tiny" in out.with_suffix(".md").read_text()
    (tmp_path / "processed" / "empty").mkdir()  # a dataset folder without meta.json: one clear error
    assert main([*args, "--processed", str(tmp_path / "processed")]) == BAD_INPUT


def test_flops_follow_table4_convention() -> None:
    # Table 4 (2 x MACs, ptflops-style): our counts are 0.1-0.8% below (a few thousand FLOPs; the
    # layer file of their code that would settle the difference is not available).
    from multitab.evaluation.paper.complexity import PAPER_TABLE4, complexity

    for ds in ["higgs", "acs_income"]:
        for name in ["mmoe", "ple", "stem"]:
            schema = get_schema(ds)
            flops = complexity(build_authors(name, schema), schema)["flops"] / 1e6
            assert flops == pytest.approx(PAPER_TABLE4[(name, ds)][1], rel=0.01), (name, ds, flops)


def test_an_accelerated_model_is_refused() -> None:
    from multitab.models.accelerate import accelerate_cpu

    schema = get_schema("higgs")
    torch.manual_seed(0)
    model = build_authors("multitab_net", schema)
    x_num, x_cat = torch.zeros(4, schema.n_num), torch.zeros(4, len(schema.features) - schema.n_num, dtype=torch.long)
    assert count_macs(model, x_num, x_cat) > 0
    # the kernels use the FFN's Linear weights without calling the modules, so hooks would miss them
    with pytest.raises(ValueError, match="accelerate_cpu"):
        count_macs(accelerate_cpu(model), x_num, x_cat)


def test_complexity_of_a_dataset_without_the_authors_files_uses_the_recipes(tmp_path: Path) -> None:
    from stages.complexity import main

    meta = {"dataset": "mine", "features": [{"name": "x y", "kind": "numerical"}, {"name": "C", "kind": "categorical",
                                                                                   "cardinality": 4}],
            "tasks": [{"name": "y", "type": "binary"}, {"name": "z", "type": "regression"}]}
    (tmp_path / "processed" / "mine").mkdir(parents=True)
    (tmp_path / "processed" / "mine" / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "params.yaml").write_text("complexity: {batch_size: 1}\n")
    for folder in ("recipe", "protocol"):
        shutil.copytree(ROOT / "hparams" / folder, tmp_path / "hparams" / folder)
    out = tmp_path / "tables" / "complexity"
    assert main(["--params", str(tmp_path / "params.yaml"), "--out", str(out), "--processed",
                 str(tmp_path / "processed")]) == 0
    df = pd.read_csv(out.with_suffix(".csv"))
    assert list(df["model"]) == list(MODELS) and (df["dataset"] == "mine").all()
