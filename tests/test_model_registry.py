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
    model = build_model("multitab_net", meta, protocol="authors_code")
    # MultiTab-Bench configurations use the authors' multitab_bench_example entry
    assert model.inter_sample == "per_sample_mixing" and model.mask is None
    assert build_model("multitab_net", meta, mask="f_t", protocol="authors_code").mask is not None
    with pytest.raises(ValueError, match="no hyperparameter"):
        build_model("multitab_net", meta, learning_rat=1e-3, protocol="authors_code")
    with pytest.raises(KeyError, match="unknown model"):
        build_model("nope", meta, protocol="authors_code")
    with pytest.raises(ValueError, match="inter_sample"):
        build_model("multitab_net", meta, inter_sample="rope", protocol="authors_code")


@pytest.mark.parametrize("dataset", [*SELECTED_HPARAMS, "some_bench_config"])
def test_defaults_are_constructor_keywords(dataset: str) -> None:
    for name in MODELS:
        assert set(model_defaults(dataset, name, protocol="authors_code")) <= set(hyperparameters(name)), name


def test_higgs_defaults_reproduce_the_published_configuration() -> None:
    d = model_defaults("higgs", "multitab_net", protocol="authors_code")
    assert d["inter_sample"] == "per_sample_mixing" and d["mask"] == "t_t" and d["multi_token"] is True
    assert model_defaults("acs_income", "multitab_net", protocol="authors_code")["inter_sample"] == "attention"
    assert model_defaults("aliexpress", "multitab_net", protocol="authors_code")["multi_token"] is False


def test_config_fields_are_constructor_keywords() -> None:
    for name in MODELS:
        assert set(TINY.get(name, {})) <= set(hyperparameters(name))
        with pytest.raises(ValueError):
            build_model(name, SCHEMA, not_a_field=1, protocol="authors_code")
    with pytest.raises(ValueError, match="n_experts"):
        build_model("mmoe", SCHEMA, n_experts=0, protocol="authors_code")
    with pytest.raises(ValueError, match="dropout"):
        build_model("ple", SCHEMA, dropout=1.5, protocol="authors_code")
    with pytest.raises(ValueError, match="expert_d_hidden"):
        build_model("stem", SCHEMA, expert_d_hidden=(), protocol="authors_code")
    with pytest.raises(ValueError, match="n_task_experts"):
        build_model("stem", SCHEMA, n_task_experts=0, protocol="authors_code")  # PLE accepts 0 (shared experts only), STEM not
    assert build_model("ple", SCHEMA, n_task_experts=0, protocol="authors_code").layers[0].k == 0


def test_defaults_follow_the_selected_configuration() -> None:
    higgs = get_schema("higgs")
    ple = build_model("ple", higgs, protocol="authors_code")
    assert len(ple.layers) == 1 and ple.layers[0].k == 1 and ple.layers[0].s == 1
    acs = build_model("stem", get_schema("acs_income"), protocol="authors_code")
    assert acs.layers[0].k == 2 and acs.layers[0].s == 4
    assert build_model("mmoe", get_schema("aliexpress"), protocol="authors_code").tokenizer.d_embedding == 8
    assert MODELS["stl_mlp"] is type(build_model("stl_mlp", higgs, protocol="authors_code"))
