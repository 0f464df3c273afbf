"""The recipe files (hparams/recipe/<model>.yaml): every value is the paper's shared setup or the authors' most
common one, as its `source:` says, and the recipe resolved from a data shape is a complete hyperparameter set."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from multitab.files.io import read_yaml_file
from multitab.hparams import HparamsError, read
from multitab.hparams.keywords import problems
from multitab.hparams.recipe import recipe, recipe_file
from multitab.registry import MODEL_NAMES

ROOT = Path(__file__).resolve().parents[1]
# The paper's shared setup (Sec. 5.1): embedding 16 (8 above 50 features), transformer hidden 256 and 4 heads,
# MLP [256, 128], 8 experts, Adam with weight decay 1e-5, batch 2048.
SHARED = {"model.d_embedding": 16, "model.n_heads": 4, "model.ffn_d_hidden": 256, "model.n_experts": 8,
          "model.expert_d_hidden": (256, 128), "model.shared_d_hidden": (256, 128), "optim.optimizer": "adam",
          "optim.weight_decay": 1e-5, "batch_size": 2048}


def authors_most_common(model: str, key: str) -> Any:
    """The most common value of `key` (`model.<k>` / `optim.<k>`) over the authors' published files of `model`
    (hparams/authors/*/<model>.yaml; a file saying they published nothing is left out); a tie goes to the
    smaller number."""
    section, _, name = key.partition(".")
    files = [read(p, str(p)) for p in sorted((ROOT / "hparams" / "authors").glob(f"*/{model}.yaml"))]
    values = [getattr(h, section)[name] for h in files if h.published]
    counts = Counter(values)
    top = max(counts.values())
    tied = [v for v in counts if counts[v] == top]
    return min(tied) if len(tied) > 1 else tied[0]


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_every_recipe_value_comes_from_where_its_source_says(model: str) -> None:
    data = read_yaml_file(ROOT / recipe_file(model))
    h, batch_size = recipe(model, 10, root=ROOT)
    values = {**{f"model.{k}": v for k, v in h.model.items()}, **{f"optim.{k}": v for k, v in (h.optim or {}).items()}}
    if batch_size is not None:
        values["batch_size"] = batch_size
    assert set(data["source"]) == set(values), "every value says where it comes from"
    for key, value in values.items():
        source = data["source"][key]
        if source.startswith("the paper's shared setup"):
            assert value == SHARED[key], key
        elif source.startswith("the authors' most common"):
            assert value == authors_most_common(model, key), key
        else:  # the authors published nothing for this model: their file holds the constructor's default
            assert "published no selection" in source, key
            authors = read(ROOT / "hparams" / "authors" / "higgs" / f"{model}.yaml")
            section, _, name = key.partition(".")
            assert not authors.published and value == getattr(authors, section)[name], key


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_a_resolved_recipe_is_complete_and_its_embedding_follows_the_width(model: str) -> None:
    narrow, _ = recipe(model, 50, root=ROOT)
    wide, _ = recipe(model, 51, root=ROOT)
    assert problems(model, narrow.model) == [] and problems(model, wide.model) == []
    assert narrow.record()["source"] == "recipe"
    if "d_embedding" in narrow.model:
        assert (narrow.model["d_embedding"], wide.model["d_embedding"]) == (16, 8)


def test_the_learning_rate_and_dropout_are_the_authors_most_common() -> None:
    # a worked case: MMoE's published learning rates are 1e-3 (ACS, AliExpress, Bench) and 1e-4 (Higgs); its
    # dropouts 0.2 (ACS, AliExpress) and 0.0 (Higgs, Bench): a tie, the smaller wins
    h, _ = recipe("mmoe", 10, root=ROOT)
    assert (h.optim or {})["lr"] == 0.001 and h.model["dropout"] == 0.0


def test_a_recipe_that_lacks_a_keyword_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "hparams" / "recipe").mkdir(parents=True)
    text = (ROOT / recipe_file("mmoe")).read_text().replace("  n_experts: 8\n", "")
    (tmp_path / recipe_file("mmoe")).write_text(text)
    with pytest.raises(HparamsError, match=r"hparams/recipe/mmoe.yaml: model.n_experts: missing"):
        recipe("mmoe", 10, root=tmp_path)
