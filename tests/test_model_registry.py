"""The model registry (multitab.registry.MODEL_CLASSES -> multitab.models.MODELS) and `build_model(name, schema,
hparams)` with the authors' hyperparameter files (hparams/authors/, multitab.hparams)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _models_tiny import SCHEMA, TINY
from multitab.datasets.schema import get_schema
from multitab.hparams import load
from multitab.models import MODELS, RUN_KEYWORDS, build_model, hyperparameters
from multitab.registry import MODEL_CLASSES, MODEL_NAMES, PAPER_ROWS, REGISTRY, table_order

ROOT = Path(__file__).resolve().parents[1]


def authors(dataset: str, model: str) -> dict:
    return load(dataset, model, protocol="authors_code", root=ROOT).model


def test_the_registry_is_one_table() -> None:
    assert list(MODELS) == list(MODEL_CLASSES) == list(MODEL_NAMES)
    for name, path in MODEL_CLASSES.items():
        module, _, cls = path.partition(":")
        assert MODELS[name].__module__ == module and MODELS[name].__name__ == cls


def test_the_tables_list_the_papers_models_in_its_order_then_ours() -> None:
    import pandas as pd

    from multitab.evaluation.paper.published import FOLDER

    published = pd.read_csv(FOLDER / "paper_table3_test_results.csv").columns
    assert list(PAPER_ROWS) == [c for c in published if c not in ("dataset", "task", "metric")]
    labels = [entry.label for entry in REGISTRY.values()]
    assert len(set(labels)) == len(labels) and set(PAPER_ROWS) <= set(labels)
    assert [REGISTRY[name].label for name in table_order()] == [*PAPER_ROWS, "MAYA"]
    # a new model goes after them, whatever its place in the registry
    assert table_order({"toy": REGISTRY["maya"], **REGISTRY})[-2:] == ("toy", "maya")


def test_registry_and_build_model_from_meta() -> None:
    meta = {
        "dataset": "some_bench_config",
        "features": [{"name": "x0", "kind": "numerical", "cardinality": None}]
        + [{"name": "c0", "kind": "categorical", "cardinality": 4}],
        "tasks": [{"name": "t0", "type": "regression", "n_classes": None}],
    }
    # the authors' MultiTab-Bench example configuration, verbatim
    model = build_model("multitab_net", meta, authors("multitab_bench", "multitab_net"))
    assert model.inter_sample == "per_sample_mixing" and model.mask is None
    bench = authors("multitab_bench", "multitab_net")
    assert build_model("multitab_net", meta, {**bench, "mask": "f_t"}).mask is not None
    with pytest.raises(ValueError, match="no hyperparameter"):
        build_model("multitab_net", meta, {**bench, "learning_rat": 1e-3})
    with pytest.raises(KeyError, match="unknown model"):
        build_model("nope", meta, {})
    with pytest.raises(ValueError, match="inter_sample"):
        build_model("multitab_net", meta, {**bench, "inter_sample": "rope"})


@pytest.mark.parametrize("name", list(MODELS))
def test_build_model_uses_no_constructor_default(name: str) -> None:
    every = authors("multitab_bench", name)
    assert set(every) == set(hyperparameters(name)) - set(RUN_KEYWORDS)  # XGBoost's come from the run
    for keyword in every:
        with pytest.raises(ValueError, match=rf"\['{keyword}'\] not given"):
            build_model(name, SCHEMA, {k: v for k, v in every.items() if k != keyword})


def test_higgs_files_reproduce_the_published_configuration() -> None:
    d = authors("higgs", "multitab_net")
    assert d["inter_sample"] == "per_sample_mixing" and d["mask"] == "t_t" and d["multi_token"] is True
    assert authors("acs_income", "multitab_net")["inter_sample"] == "attention"
    assert authors("aliexpress", "multitab_net")["multi_token"] is False


def test_config_fields_are_constructor_keywords() -> None:
    for name in MODELS:
        assert set(TINY.get(name, {})) <= set(hyperparameters(name))
        with pytest.raises(ValueError):
            build_model(name, SCHEMA, {"not_a_field": 1})
    def bench(name: str, **kw: object) -> dict:
        return {**authors("multitab_bench", name), **kw}

    with pytest.raises(ValueError, match="n_experts"):
        build_model("mmoe", SCHEMA, bench("mmoe", n_experts=0))
    with pytest.raises(ValueError, match="dropout"):
        build_model("ple", SCHEMA, bench("ple", dropout=1.5))
    with pytest.raises(ValueError, match="expert_d_hidden"):
        build_model("stem", SCHEMA, bench("stem", expert_d_hidden=()))
    with pytest.raises(ValueError, match="n_task_experts"):
        build_model("stem", SCHEMA, bench("stem", n_task_experts=0))  # PLE accepts 0 (shared experts only), STEM not
    assert build_model("ple", SCHEMA, bench("ple", n_task_experts=0)).layers[0].k == 0


def test_models_follow_the_selected_configuration() -> None:
    higgs = get_schema("higgs")
    ple = build_model("ple", higgs, authors("higgs", "ple"))
    assert len(ple.layers) == 1 and ple.layers[0].k == 1 and ple.layers[0].s == 1
    acs = build_model("stem", get_schema("acs_income"), authors("acs_income", "stem"))
    assert acs.layers[0].k == 2 and acs.layers[0].s == 4
    assert build_model("mmoe", get_schema("aliexpress"), authors("aliexpress", "mmoe")).tokenizer.d_embedding == 8
    assert MODELS["stl_mlp"] is type(build_model("stl_mlp", higgs, authors("higgs", "stl_mlp")))
