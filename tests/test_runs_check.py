"""`python -m multitab.runs` refuses at expansion what the run matrix cannot run, in one line naming the run, the
file or the params key (exit 3, runs.yaml untouched): a hyperparameter file missing a keyword of its model, or
giving one it does not take or of the wrong type; an overlay in params.yaml naming a wrong keyword; a dataset
name that names nothing; a name a DVC stage name cannot hold; two runs writing one folder; a matrix larger than
`orchestration.max_train_stages`."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from multitab.config import load_params, read_yaml
from multitab.models import MODELS
from multitab.runs.cli import main
from multitab.runs.expand import active_groups
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]
BASE = read_yaml(ROOT / "params.yaml")


def _project(tmp_path: Path, raw: dict[str, Any], models: tuple[str, ...] = ()) -> Path:
    """params.yaml `raw` in `tmp_path` with the protocols' overlays and the authors' files (of `models` on
    acs_income only, else all of them); returns the params file."""
    if models:
        (tmp_path / "hparams" / "authors" / "acs_income").mkdir(parents=True)
        shutil.copytree(ROOT / "hparams" / "protocol", tmp_path / "hparams" / "protocol")
        for model in models:
            shutil.copy(ROOT / "hparams" / "authors" / "acs_income" / f"{model}.yaml",
                        tmp_path / "hparams" / "authors" / "acs_income" / f"{model}.yaml")
    else:
        shutil.copytree(ROOT / "hparams", tmp_path / "hparams")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    return params


def _small(models: list[str], **train: Any) -> dict[str, Any]:
    """The repository's `train` and one run group `real`: `models` on acs_income, seed 0 (no `datasets:`: the
    project names its processed folder directly)."""
    return {"protocol": BASE["protocol"], "train": {**BASE["train"], **train},
            "runs": {"real": {"data": {"datasets": ["acs_income"]}, "models": models, "seeds": [0], "train": {}}}}


def _refused(params: Path, capsys: pytest.CaptureFixture[str], *groups: str) -> str:
    """The one line `python -m multitab.runs` prints refusing `params` (exit 3, no runs.yaml written)."""
    out = params.parent / "runs.yaml"
    capsys.readouterr()
    assert main(["--params", str(params), "--out", str(out), *(["--groups", *groups] if groups else [])]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert not out.exists()
    return err


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_the_repository_matrix_passes_every_check() -> None:
    """The committed hyperparameter files and params.yaml, every group in: what `make repro` writes is unchanged."""
    from multitab.runs.check import check

    params = load_params(ROOT / "params.yaml")
    check(params, active_groups(params, list(params.runs)), ROOT)


@pytest.mark.parametrize("model", list(MODELS))
def test_a_keyword_missing_from_a_file_is_refused_naming_run_file_and_keyword(
        model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = _project(tmp_path, _small([model]), models=(model,))
    file = tmp_path / "hparams" / "authors" / "acs_income" / f"{model}.yaml"
    text = file.read_text()
    assert main(["--params", str(params), "--out", str(tmp_path / "ok.yaml")]) == 0
    keywords = list(yaml.safe_load(text)["model"])  # every keyword of the model (test_hparams.py checks)
    assert keywords
    for keyword in keywords:
        _edit(file, lambda data, k=keyword: data["model"].pop(k))
        err = _refused(params, capsys)
        assert f"hparams/authors/acs_income/{model}.yaml: model.{keyword}: missing" in err, err
        assert f"run real-acs_income-{model}-0" in err, err
        file.write_text(text)


def test_a_value_of_the_wrong_type_or_an_unknown_keyword_in_a_file_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = _project(tmp_path, _small(["multitab_net", "xgboost"]), models=("multitab_net", "xgboost"))
    file = tmp_path / "hparams" / "authors" / "acs_income" / "multitab_net.yaml"
    text = file.read_text()
    cases = {
        "d_embedding": ("fast", "model.d_embedding: expected an integer, got 'fast'"),
        "attention_dropout": ("0.2", "model.attention_dropout: expected a number, got '0.2'"),
        "head_d_hidden": (64, "model.head_d_hidden: expected a list (each an integer), got 64"),
        "head_dropout": (True, "model.head_dropout: expected a number or null, got True"),
        "mask": ("t_not_t", "model.mask: expected one of ['none', 't_t', 'f_t', 'both'], got 't_not_t'"),
        "multi_token": ("yes", "model.multi_token: expected true or false, got 'yes'"),
        "n_headz": (4, "model.n_headz: not a keyword of multitab_net"),
    }
    for keyword, (value, message) in cases.items():
        _edit(file, lambda data, k=keyword, v=value: data["model"].update({k: v}))
        err = _refused(params, capsys)
        assert f"hparams/authors/acs_income/multitab_net.yaml: {message}" in err, err
        assert "run real-acs_income-multitab_net-0" in err, err
        file.write_text(text)
    _edit(file, lambda data: data["model"].update(attention_dropout=0))  # an integer is a number
    assert main(["--params", str(params), "--out", str(tmp_path / "ok.yaml")]) == 0
    _edit(file, lambda data: data.pop("optim"))
    assert "multitab_net.yaml: optim: missing: multitab_net trains with an optimiser" in _refused(params, capsys)
    file.write_text(text)
    file.unlink()
    err = _refused(params, capsys)
    assert "hparams/authors/acs_income/multitab_net.yaml: hyperparameter file not found" in err, err
    assert "run real-acs_income-multitab_net-0" in err, err
    file.write_text(text)
    # XGBoost takes its seed, early stopping, device and threads from the run, not from its file
    _edit(tmp_path / "hparams" / "authors" / "acs_income" / "xgboost.yaml", lambda data: data["model"].update(seed=1))
    assert "xgboost.yaml: model.seed: not a keyword of xgboost" in _refused(params, capsys)


def test_an_overlay_naming_a_wrong_keyword_is_refused_naming_params_yaml(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    variants = {"wide": {"model": "mmoe", "overrides": {"n_expertz": 4}}}
    cases: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
        # (train keys, the group's train keys, what the message says)
        "model_overrides": ({"model_overrides": {"mmoe": {"n_expertz": 4}}}, {},
                            "params.yaml: train.model_overrides.mmoe.n_expertz: not a keyword of mmoe"),
        "per_dataset": ({"model_overrides": {"mmoe@acs_income": {"dropout": "high"}}}, {},
                        "params.yaml: train.model_overrides.mmoe@acs_income.dropout: expected a number, got 'high'"),
        "group": ({}, {"model_overrides": {"mmoe": {"expert_d_hiden": [8]}}},
                  "params.yaml: runs.real.train.model_overrides.mmoe.expert_d_hiden: not a keyword of mmoe"),
        "variant": ({"variants": variants}, {},
                    "params.yaml: train.variants.wide.overrides.n_expertz: not a keyword of mmoe"),
    }
    for case, (train, group_train, message) in cases.items():
        raw = _small(["mmoe"], **train)
        raw["runs"]["real"]["train"] = group_train
        err = _refused(_project(tmp_path / case, raw, models=("mmoe",)), capsys)
        assert message in err and "hparams/authors" not in err, err


def test_a_grid_value_of_the_wrong_type_is_refused_naming_the_axis(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _small(["mmoe"])
    raw["runs"]["sweep_mlp"] = {**BASE["runs"]["sweep_mlp"], "data": {"datasets": ["acs_income"]},
                                "grid": {"lr": [0.001], "dropout": [0.1, "high"]}}
    err = _refused(_project(tmp_path, raw, models=("mmoe",)), capsys, "sweep_mlp")
    assert "params.yaml: runs.sweep_mlp.grid.dropout: 'high': expected a number" in err, err


def _full(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The repository's params.yaml with `change`, and its hyperparameter files, in `tmp_path`."""
    raw = copy.deepcopy(BASE)
    change(raw)
    return _project(tmp_path, raw)


def _group(name: str, **keys: Any) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        raw["runs"][name] = {"data": {"datasets": ["higgs"]}, "models": ["mmoe"], "seeds": [0], "train": {}, **keys}
    return change


@pytest.mark.parametrize(("change", "message"), [
    (lambda raw: raw["runs"]["real"].update(data={"datasets": ["acs_incme"]}),
     "params.yaml: runs.real.data.datasets: 'acs_incme' is not a dataset"),
    (lambda raw: raw["icl"].update(datasets=["higgz"]), "params.yaml: icl.datasets: 'higgz' is not a dataset"),
], ids=["group", "icl"])
def test_an_unknown_dataset_is_refused_naming_the_key_and_the_known_names(
        change: Callable[[dict[str, Any]], None], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_full(tmp_path, change), capsys)
    assert message in err and "'acs_income', 'aliexpress', 'higgs'" in err, err


@pytest.mark.parametrize(("change", "key", "name"), [
    (_group("my group"), "runs", "my group"),
    (_group("a@b"), "runs", "a@b"),
    (_group("a-b"), "runs", "a-b"),
    (_group("a.b"), "runs", "a.b"),
    (lambda raw: raw["train"]["variants"].update({"single none": raw["train"]["variants"]["single_none"]}),
     "train.variants", "single none"),
    (_group("own", train={"variants": {"x+y": {"model": "mmoe", "overrides": {}}}}), "runs.own.train.variants", "x+y"),
], ids=["space", "at", "dash", "dot", "variant", "group_variant"])
def test_a_name_a_stage_name_cannot_hold_is_refused(
        change: Callable[[dict[str, Any]], None], key: str, name: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_full(tmp_path, change), capsys)
    assert f"params.yaml: {key}: {name!r} goes into DVC stage names: use letters, digits and `_` only" in err, err


def test_a_grid_value_a_stage_name_cannot_hold_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["runs"]["sweep_mlp"]["grid"]["dropout"] = [0.1, "0.2 or 0.3"]
    err = _refused(_full(tmp_path, change), capsys, "sweep_mlp")
    assert "params.yaml: runs.sweep_mlp: stage key 'sweep_mlp-p06_pd3_t3-mmoe-lr0_0001-dropout0_2 or 0_3-0'" in err


@pytest.mark.parametrize(("change", "message"), [
    # the same dataset, model and seed under the default `out`: the same run folder
    (_group("again", train={"max_epochs": 3}), "train@real-higgs-mmoe-0 (out) and train@again-higgs-mmoe-0 (out) "
     "write the same folder results/runs/higgs/mmoe/seed0"),
    # their own `out`, the default `checkpoints`
    (_group("again", out="results/again_runs"), "train@real-higgs-mmoe-0 (checkpoints) and train@again-higgs-mmoe-0 "
     "(checkpoints) write the same folder results/checkpoints/higgs/mmoe/seed0"),
    # a stacked stage writes its members' parent folder: another group's seed 2 falls inside it
    (lambda raw: (_group("stacked", seeds=[0, 1], train={"stack_seeds": True}, out="results/x",
                         checkpoints="results/xc")(raw),
                  _group("third", seeds=[2], out="results/x", checkpoints="results/xc3")(raw)),
     "train@third-higgs-mmoe-2 (out) writes results/x/higgs/mmoe/seed2, inside the folder results/x/higgs/mmoe of "
     "train_stack@stacked-higgs-mmoe (out)"),
    # an opt-in group overlaps too (its folders are on disk when it has run)
    (_group("later", opt_in=True), "train@real-higgs-mmoe-0 (out) and train@later-higgs-mmoe-0 (out) write the same"),
], ids=["same_out", "same_checkpoints", "inside_a_stack", "opt_in"])
def test_two_runs_writing_one_folder_are_refused_naming_both(
        change: Callable[[dict[str, Any]], None], message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_full(tmp_path, change), capsys)
    assert f"params.yaml: {message}" in err, err


def test_a_matrix_above_the_cap_is_refused_saying_how_to_raise_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stages = len(yaml.safe_load((ROOT / "runs.yaml").read_text())["train_runs"])
    params = _full(tmp_path, lambda raw: raw["orchestration"].update(max_train_stages=stages - 1))
    err = _refused(params, capsys)
    assert f"the run matrix has {stages} training stages, more than orchestration.max_train_stages={stages - 1}" in err
    assert "raise orchestration.max_train_stages in" in err, err
    _edit(params, lambda raw: raw["orchestration"].update(max_train_stages=stages))
    assert main(["--params", str(params), "--out", str(tmp_path / "runs.yaml")]) == 0


def test_a_paper_dataset_without_its_authors_file_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The authors published a selection for every model on the paper's datasets (hparams/authors/, generated):
    a missing one is a broken checkout, not a reason to train something else (the recipe) in silence."""
    params = _project(tmp_path, _small(["mmoe"]))
    (tmp_path / "hparams" / "authors" / "acs_income" / "mmoe.yaml").unlink()
    err = _refused(params, capsys)
    assert "hparams/authors/acs_income/mmoe.yaml: hyperparameter file not found" in err, err
    assert "python -m multitab.hparams.authors" in err and "real-acs_income-mmoe-0" in err, err
