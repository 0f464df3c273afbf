"""params.yaml is read strictly: a name that names nothing in a per-model or per-dataset map, a number out
of its range, a list with a repeated seed and a key given twice are errors at load, each naming the key
(and for YAML the line), instead of being ignored, clamped or deduplicated without a word."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from multitab.config import ConfigError, parse_params, read_yaml
from multitab.registry import MODEL_NAMES
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]
BASE = read_yaml(ROOT / "params.yaml")


def _set(*path: Any) -> Callable[[dict[str, Any]], None]:
    *keys, last, value = path

    def mutate(raw: dict[str, Any]) -> None:
        node = raw
        for k in keys:
            node = node[k]
        node[last] = value

    return mutate


# (mutation, what the message must say)
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "optim_model_typo": (_set("train", "optim", {"stl_mpl": {"lr": 0.5}}),
                         "train.optim: 'stl_mpl' is not a registered model; did you mean 'stl_mlp'?"),
    "patience_dataset_typo": (_set("train", "patience", {"acs_incme": 1, "default": 5}),
                              "train.patience: 'acs_incme' is not `default` or a dataset"),
    "policy_dataset_typo": (_set("validation", "policy", "acs_incme", BASE["validation"]["policy"]["higgs"]),
                            "validation.policy: 'acs_incme'"),
    "overrides_dataset_typo": (_set("train", "model_overrides", {"saint@higs": {"n_blocks": 2}}),
                               "train.model_overrides: 'higs' is not a dataset"),
    "overrides_model_typo": (_set("train", "model_overrides", {"sant": {"n_blocks": 2}}),
                             "train.model_overrides: 'sant' is not a registered model"),
    "group_model_typo": (_set("runs", "real", "models", ["stl_mlp", "mmoee"]), "runs.real.models: 'mmoee'"),
    "study_model_typo": (_set("runs", "study", "models", ["stl_mlp", "mmoe", "ple", "stem", "multitab-net"]),
                         "runs.study.models: 'multitab-net'"),
    "variant_typo": (_set("runs", "ablation", "models", ["multitab_net@single_nne"]),
                     "runs.ablation.models: 'single_nne' is not a train variant"),
    "group_data_typo": (_set("runs", "bench", "data", {"bench": ["p06_pd3_t9"]}),
                        "runs.bench.data.bench: 'p06_pd3_t9'"),
    "group_data_kind": (_set("runs", "bench", "data", "synthetic"), "runs.bench: data='synthetic': expected one of"),
    "group_train_key": (_set("runs", "bench", "train", {"max_epoch": 3}), "runs.bench.train.max_epoch: unknown key"),
    "group_without_train": (lambda raw: raw["runs"]["real"].pop("train"), "runs.real: missing key 'train'"),
    "claim_outside_the_study": (_set("study", "claim", "rivals", ["mmoe", "saint"]),
                                "study.claim: 'saint' is not one of runs.study.models"),
    "aggregate_dataset_typo": (_set("aggregate", "datasets", ["higs"]), "aggregate.datasets: 'higs'"),
    "negative_noise": (_set("datasets", "higgs", "preprocess", "noise", -1),
                       "datasets.higgs.preprocess.noise=-1.0: must be >= 0"),
    "zero_quantiles": (_set("datasets", "higgs", "preprocess", "max_quantiles", 0),
                       "datasets.higgs.preprocess.max_quantiles=0: must be >= 10"),
    "zero_subsample": (_set("datasets", "higgs", "preprocess", "subsample", 0),
                       "datasets.higgs.preprocess.subsample=0: must be >= 1"),
    "negative_threads": (_set("train", "num_threads", -1), "train.num_threads=-1: must be >= 0"),
    "smoothing_zero": (_set("train", "early_stopping_smoothing", 0), "train.early_stopping_smoothing=0.0: must be > 0"),
    "smoothing_one": (_set("train", "early_stopping_smoothing", 1), "train.early_stopping_smoothing=1.0: must be < 1"),
    "smoothing_word": (_set("train", "early_stopping_smoothing", "ema"), "train.early_stopping_smoothing: 'ema'"),
    "group_smoothing": (_set("runs", "bench", "train", {"early_stopping_smoothing": 1.5}),
                        "runs.bench.train.early_stopping_smoothing=1.5: must be < 1"),
    "negative_val_fraction": (_set("datasets", "acs_income", "split", "val_fraction", -0.1),
                              "datasets.acs_income.split.val_fraction=-0.1: must be >= 0"),
    "percent_val_fraction": (_set("datasets", "acs_income", "split", "val_fraction", 15),
                             "datasets.acs_income.split.val_fraction=15.0: must be < 1"),
    "no_training_rows": (_set("datasets", "acs_income", "split", "test_fraction", 0.9),
                         "datasets.acs_income.split: val_fraction 0.15 + test_fraction 0.9"),
    "repeated_seed": (_set("runs", "real", "seeds", [0, 0]), "runs.real.seeds=[0, 0]: lists 0 more than once"),
    "negative_retries": (_set("datasets", "higgs", "remote", "retries", -1),
                         "datasets.higgs.remote.retries=-1: must be >= 0"),
    "fraction_above_one": (_set("validation", "raw", "duplicates_max_fraction", 2),
                           "validation.raw.duplicates_max_fraction=2.0: must be <= 1"),
}


def test_the_repository_params_load() -> None:
    params = parse_params(copy.deepcopy(BASE))
    assert params.train.early_stopping_smoothing is None  # off: the paper's rule in every committed run


def test_early_stopping_smoothing_parses_and_reaches_the_run_records_only_when_set() -> None:
    """`train.early_stopping_smoothing` (and a group's) parses to a float; run_params (metrics.json
    `params`) names it only when set, so the records of runs trained without it still match."""
    from multitab.runs.profiles import group_train, run_params

    plain = parse_params(copy.deepcopy(BASE))
    assert "early_stopping_smoothing" not in run_params(plain, "bench", "p06_pd3_t3", "mmoe")["train"]
    raw = copy.deepcopy(BASE)
    raw["train"]["early_stopping_smoothing"] = 0.5
    raw["runs"]["real"]["train"] = {"early_stopping_smoothing": 0.8}
    params = parse_params(raw)
    assert params.train.early_stopping_smoothing == 0.5
    assert group_train(params, "real").early_stopping_smoothing == 0.8
    assert run_params(params, "bench", "p06_pd3_t3", "mmoe")["train"]["early_stopping_smoothing"] == 0.5
    assert run_params(params, "real", "higgs", "mmoe")["train"]["early_stopping_smoothing"] == 0.8


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_params_fail_at_load_naming_the_key(case: str) -> None:
    mutate, expected = CASES[case]
    raw = copy.deepcopy(BASE)
    mutate(raw)
    with pytest.raises(ConfigError) as e:
        parse_params(raw)
    assert str(e.value).startswith("params.yaml: ") and expected in str(e.value), str(e.value)


def test_a_key_given_twice_is_an_error_for_every_reader(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from multitab.hparams import read
    from stages import split

    text = (ROOT / "params.yaml").read_text()
    twice = text.replace("\n  device: auto", "\n  device: cpu\n  device: auto", 1)
    assert twice != text
    params = tmp_path / "params.yaml"
    params.write_text(twice)
    line = twice[: twice.index("\n  device: auto")].count("\n") + 2
    with pytest.raises(ConfigError, match=rf"line {line}, column 3: key 'device' appears twice in one mapping "
                                          rf"\(first at line {line - 1}\)"):
        read_yaml(params)
    # a stage: one line naming the file, exit 3 (the cause is the input), no traceback
    rc = split.main(["--params", str(params), "--dataset", "higgs", "--raw", str(tmp_path), "--out",
                     str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == BAD_INPUT and str(params) in err and "appears twice" in err and "Traceback" not in err
    hparams = tmp_path / "mmoe.yaml"  # a hyperparameter file (multitab.hparams)
    hparams.write_text("model: {dropout: 0.1}\nmodel: {dropout: 0.2}\n")
    with pytest.raises(ValueError, match="key 'model' appears twice"):
        read(hparams)


def test_model_names_match_the_registry() -> None:
    from multitab.models import MODELS

    assert tuple(MODELS) == MODEL_NAMES
