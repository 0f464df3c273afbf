"""The model registry and the authors' selected configurations as constructor keywords (defaults.py)."""

from __future__ import annotations

import pytest

from _models_tiny import SCHEMA, TINY
from multitab.datasets.schema import get_schema
from multitab.models import MODELS, build_model, hyperparameters, model_defaults
from multitab.models.defaults import SELECTED_HPARAMS


def test_registry_and_build_model_from_meta() -> None:
    meta = {
        "dataset": "some_bench_config",
        "features": [{"name": "x0", "kind": "numerical", "cardinality": None}]
        + [{"name": "c0", "kind": "categorical", "cardinality": 4}],
        "tasks": [{"name": "t0", "type": "regression", "n_classes": None}],
    }
    model = build_model("multitab_net", meta)
    # MultiTab-Bench configurations use the authors' multitab_bench_example entry
    assert model.inter_sample == "per_sample_mixing" and model.mask is None
    assert build_model("multitab_net", meta, mask="f_t").mask is not None
    with pytest.raises(ValueError, match="no hyperparameter"):
        build_model("multitab_net", meta, learning_rat=1e-3)
    with pytest.raises(KeyError, match="unknown model"):
        build_model("nope", meta)
    with pytest.raises(ValueError, match="inter_sample"):
        build_model("multitab_net", meta, inter_sample="rope")


@pytest.mark.parametrize("dataset", [*SELECTED_HPARAMS, "some_bench_config"])
def test_defaults_are_constructor_keywords(dataset: str) -> None:
    for name in MODELS:
        assert set(model_defaults(dataset, name)) <= set(hyperparameters(name)), name


def test_higgs_defaults_reproduce_the_published_configuration() -> None:
    d = model_defaults("higgs", "multitab_net")
    assert d["inter_sample"] == "per_sample_mixing" and d["mask"] == "t_t" and d["multi_token"] is True
    assert model_defaults("acs_income", "multitab_net")["inter_sample"] == "attention"
    assert model_defaults("aliexpress", "multitab_net")["multi_token"] is False


def test_config_fields_are_constructor_keywords() -> None:
    for name in MODELS:
        assert set(TINY.get(name, {})) <= set(hyperparameters(name))
        with pytest.raises(ValueError):
            build_model(name, SCHEMA, not_a_field=1)
    with pytest.raises(ValueError, match="n_experts"):
        build_model("mmoe", SCHEMA, n_experts=0)
    with pytest.raises(ValueError, match="dropout"):
        build_model("ple", SCHEMA, dropout=1.5)
    with pytest.raises(ValueError, match="expert_d_hidden"):
        build_model("stem", SCHEMA, expert_d_hidden=())
    with pytest.raises(ValueError, match="n_task_experts"):
        build_model("stem", SCHEMA, n_task_experts=0)  # PLE accepts 0 (shared experts only), STEM not
    assert build_model("ple", SCHEMA, n_task_experts=0).layers[0].k == 0


def test_defaults_follow_the_selected_configuration() -> None:
    higgs = get_schema("higgs")
    ple = build_model("ple", higgs)
    assert len(ple.layers) == 1 and ple.layers[0].k == 1 and ple.layers[0].s == 1
    acs = build_model("stem", get_schema("acs_income"))
    assert acs.layers[0].k == 2 and acs.layers[0].s == 4
    assert build_model("mmoe", get_schema("aliexpress")).tokenizer.d_embedding == 8
    assert MODELS["stl_mlp"] is type(build_model("stl_mlp", higgs))
