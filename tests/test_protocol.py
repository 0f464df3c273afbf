"""`protocol: paper | authors_code` (params.yaml; multitab.protocol; docs/deviations.md): both values
load, each changes what it should and nothing else, DVC re-runs the stages it affects, and Table 2's
rows are what they say under either value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from multitab.config import ConfigError, load_params, read_yaml
from multitab.config.data import SplitConfig
from multitab.datasets.schema import get_schema
from multitab.datasets.split import split_frames
from multitab.hparams import Hparams, load, read, selection_file
from multitab.models import build_model
from multitab.models.multitab_net import attention_mask
from multitab.models.tokenizer import Init
from multitab.protocol import PROTOCOLS
from multitab.registry import MODEL_NAMES

ROOT = Path(__file__).parents[1]
PARAMS = read_yaml(ROOT / "params.yaml")


def params_with(tmp_path: Path, **top: Any) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({**PARAMS, **top}))
    return p


def test_the_default_is_paper_and_both_values_load(tmp_path: Path) -> None:
    assert PARAMS["protocol"] == "paper"
    for protocol in PROTOCOLS:
        path = params_with(tmp_path, protocol=protocol)
        assert load_params(path).train.protocol == protocol
        for dataset in ("aliexpress", "acs_income", "higgs"):
            load_params(path).dataset(dataset)


def test_an_unknown_protocol_is_a_clear_config_error(tmp_path: Path) -> None:
    path = params_with(tmp_path, protocol="papers")
    with pytest.raises(ConfigError, match=r"params.yaml: protocol='papers' must be one of \['paper', 'authors_code'\]"):
        load_params(path)


def test_higgs_split_follows_the_protocol_and_the_other_datasets_do_not_change(tmp_path: Path) -> None:
    paper = load_params(params_with(tmp_path, protocol="paper")).datasets
    authors = load_params(params_with(tmp_path, protocol="authors_code")).datasets
    assert paper["higgs"].split == SplitConfig("ordered", 0, 0.05, 0.05)  # first 5 % val, last 5 % test
    assert authors["higgs"].split == SplitConfig("stratified", 42, 0.05, 0.05)  # their notebook's 90/5/5
    for d in ("aliexpress", "acs_income"):
        assert paper[d] == authors[d]
    # regression targets are raw under both (the paper is silent)
    assert paper["higgs"].preprocess.targets == authors["higgs"].preprocess.targets == "raw"


def test_stratified_split_is_a_seeded_stratified_partition() -> None:
    schema = get_schema("higgs")
    rng = np.random.default_rng(0)
    n = 2000
    data = pd.DataFrame({c.name: rng.normal(size=n).astype(np.float32) for c in schema.features})
    for t in schema.tasks:
        data[t.name] = (rng.random(n) < 0.3).astype(np.int64) if t.type == "binary" else rng.normal(size=n)
    data["row"] = np.arange(n)
    cfg = SplitConfig("stratified", 42, 0.05, 0.05)
    parts = split_frames(schema, {"data": data}, cfg)
    assert {k: len(v) for k, v in parts.items()} == {"train": 1800, "val": 100, "test": 100}
    rows = np.concatenate([parts[k]["row"].to_numpy() for k in ("train", "val", "test")])
    assert sorted(rows) == list(range(n))
    share = data["target"].mean()
    for k in ("val", "test"):
        assert abs(parts[k]["target"].mean() - share) <= 0.011  # stratified: the class share kept
    again = split_frames(schema, {"data": data}, cfg)
    for k in parts:
        pd.testing.assert_frame_equal(parts[k], again[k])
    other = split_frames(schema, {"data": data}, SplitConfig("stratified", 0, 0.05, 0.05))
    assert not parts["test"]["row"].equals(other["test"]["row"])
    assert sorted(parts["val"]["row"]) != list(range(100))  # random, not the first rows
    ordered = split_frames(schema, {"data": data}, SplitConfig("ordered", 0, 0.05, 0.05))
    assert ordered["val"]["row"].tolist() == list(range(100))  # the paper's: first 5 % validation


# ---------------------------------------------------------------------------------------------- models
KEYS = ("aliexpress", "acs_income", "higgs", "multitab_bench")  # hparams/authors/<key>/


def hp(key: str, model: str, protocol: str) -> Hparams:
    return load(key, model, protocol=protocol, root=ROOT)


def test_authors_code_is_their_configuration_verbatim() -> None:
    for key in KEYS:
        for model in MODEL_NAMES:
            file = selection_file("authors", key, model)
            assert hp(key, model, "authors_code") == read(ROOT / file, file)  # nothing laid over
    assert hp("aliexpress", "multitab_net", "authors_code").model["multi_token"] is False
    assert hp("multitab_bench", "multitab_net", "authors_code").model["mask"] == "none"
    assert hp("higgs", "multitab_net", "authors_code").model["inter_sample"] == "per_sample_mixing"


def test_paper_changes_exactly_the_listed_settings() -> None:
    changed = {}
    for key in KEYS:
        for model in MODEL_NAMES:
            a, p = hp(key, model, "authors_code").model, hp(key, model, "paper").model
            diff = {k: p[k] for k in p if a.get(k) != p[k]}
            if diff:
                changed[(key, model)] = diff
    assert changed == {
        ("aliexpress", "multitab_net"): {"multi_token": True, "inter_sample": "rope_attention"},
        ("higgs", "multitab_net"): {"inter_sample": "rope_attention"},
        ("higgs", "saint"): {"inter_sample": "rope_attention"},
        ("multitab_bench", "multitab_net"): {"mask": "t_t", "inter_sample": "rope_attention"},
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_built_models_follow_the_protocol(protocol: str) -> None:
    ali = build_model("multitab_net", get_schema("aliexpress"), hp("aliexpress", "multitab_net", protocol).model)
    assert ali.n_task_tokens == (2 if protocol == "paper" else 1)
    assert ali.inter_sample == ("rope_attention" if protocol == "paper" else "per_sample_mixing")
    higgs = build_model("saint", get_schema("higgs"), hp("higgs", "saint", protocol).model)
    first = next(iter(higgs.models.values()))
    assert first.inter_sample == ("rope_attention" if protocol == "paper" else "per_sample_mixing")


def test_paper_uses_adam_with_weight_decay_1e_5_for_every_model() -> None:
    for key in KEYS:
        for model in MODEL_NAMES:
            paper, authors = hp(key, model, "paper").optim, hp(key, model, "authors_code").optim
            if authors is None:  # a model that trains itself (XGBoost) has no optimiser
                assert paper is None and model == "xgboost"
                continue
            assert (paper["optimizer"], paper["weight_decay"]) == ("adam", 1e-5)
            assert {k: v for k, v in paper.items() if k not in ("optimizer", "weight_decay")} == {
                k: v for k, v in authors.items() if k not in ("optimizer", "weight_decay")
            }
    assert hp("acs_income", "multitab_net", "authors_code").optim["optimizer"] == "adamw"
    assert hp("aliexpress", "mmoe", "authors_code").optim["weight_decay"] == 1e-6


# ------------------------------------------------------------------------------------------- Table 2
_MASK_OF_LABEL = {"none": "none", "F-not-T": "f_t", "T-not-T": "t_t", "F-not-T & T-not-T": "both"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("dataset", ["aliexpress", "acs_income", "higgs"])
def test_table2_rows_are_what_they_say(tmp_path: Path, protocol: str, dataset: str) -> None:
    config = load_params(params_with(tmp_path, protocol=protocol)).train
    schema = get_schema(dataset)
    init: Init = "authors"
    for row in PARAMS["aggregate"]["ablation"]:
        run = row["model"]
        assert "@" in run, f"Table 2 row {row} reads the main run, whose settings depend on the protocol"
        base, _ = config.resolve(run)
        overrides = config.overrides_for(run, dataset)
        torch.manual_seed(0)
        hparams = {**hp(dataset, base, config.protocol).model, "init": init, **overrides}
        model = build_model(base, schema, hparams)
        multiple = row["task_tokens"] == "multiple"
        assert model.n_task_tokens == (len(schema.tasks) if multiple else 1), row
        expected = attention_mask(model.n_task_tokens, model.tokenizer.n_tokens, _MASK_OF_LABEL[row["attention_mask"]])
        assert (model.mask is None) == (expected is None), row
        if expected is not None:
            assert torch.equal(model.mask, expected), row


# ------------------------------------------------------------------------------------------------- DVC
def test_dvc_reruns_every_stage_the_protocol_affects() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in ("split", "validate_raw"):
        assert "protocol" in stages[name]["do"]["params"], name
    # aggregate: it refuses a run trained under another protocol than params.yaml's (metrics.json `params`)
    for name in ("complexity", "aggregate"):
        assert "protocol" in stages[name]["params"], name
    # train: each run's record (runs.yaml, which the stage tracks) holds the protocol; stage `runs` rewrites it
    assert "train_runs.${key}.train" in stages["train"]["do"]["params"][0]["runs.yaml"]
    assert "protocol" in stages["runs"]["params"]
    for name in ("acquire", "preprocess", "synthesize"):
        block = stages[name].get("do", stages[name])
        assert "protocol" not in block.get("params", []), name
