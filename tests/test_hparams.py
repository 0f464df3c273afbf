"""Hyperparameters as data (multitab.hparams): one file per selection, dataset and model, generated from the
authors' published selections, complete, resolved for every declared run, and a missing or malformed file
is an error that names it."""

from __future__ import annotations

import dataclasses
import inspect
import shutil
from pathlib import Path

import pytest
import yaml

from _training_tiny import write_tiny_project
from multitab.config import load_params
from multitab.hparams import HparamsError, for_run, load, protocol_overlay, read
from multitab.hparams.authors import files
from multitab.hparams.authors import main as authors_main
from multitab.models import MODELS
from multitab.protocol import PROTOCOLS
from multitab.runs.expand import expand
from multitab.runs.profiles import run_train
from multitab.runtime.exit_codes import BAD_INPUT
from multitab.training.run import RUN_KEYWORDS

ROOT = Path(__file__).resolve().parents[1]


def test_the_authors_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    wanted = files(ROOT)
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hparams" / "authors").rglob("*.yaml")}
    assert on_disk == {f for f in wanted if f.startswith("hparams/authors/")}  # none left from an earlier generation
    assert authors_main(["--root", str(ROOT), "--check"]) == 0
    # --check fails on an edited file (in a copy)
    shutil.copytree(ROOT / "hparams", tmp_path / "hparams")
    edited = tmp_path / "hparams" / "authors" / "higgs" / "mmoe.yaml"
    edited.write_text(edited.read_text().replace("n_experts: 8", "n_experts: 9"))
    assert authors_main(["--root", str(tmp_path), "--check"]) == 1
    assert authors_main(["--root", str(tmp_path)]) == 0 and authors_main(["--root", str(tmp_path), "--check"]) == 0


@pytest.mark.parametrize("folder", ["acs_income", "aliexpress", "higgs", "multitab_bench"])
def test_each_file_holds_every_constructor_keyword(folder: str) -> None:
    for name, cls in MODELS.items():
        h = read(ROOT / "hparams" / "authors" / folder / f"{name}.yaml")
        keywords = {p.name for p in inspect.signature(cls.__init__).parameters.values()
                    if p.kind is p.KEYWORD_ONLY and p.name != "schema" and p.name not in RUN_KEYWORDS}
        assert set(h.model) == keywords, f"{folder}/{name}"
        assert (h.optim is None) == (name == "xgboost"), f"{folder}/{name}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_declared_run_resolves_from_its_one_file(protocol: str) -> None:
    params = load_params(ROOT / "params.yaml")
    runs = expand(params)  # every group, the opt-in ones too
    assert len(runs) > 300
    for run in runs.values():
        config, point = run_train(params, run.group, run.model, run.point)  # what stages.train resolves
        config = dataclasses.replace(config, protocol=protocol)
        if run.hparams_file.startswith("hparams/swept/"):
            continue  # written by the sweep (make sweep)
        h = for_run(ROOT, run.hparams_file, model=run.model, dataset=run.dataset, point=point, config=config)
        assert h.file == run.hparams_file and (h.point or None) == point


def test_a_malformed_file_names_itself_and_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    cases = {
        "model: {d: 1}\nextra: 1\n": r"unknown top-level key\(s\) \['extra'\]",
        "optim: {lr: 0.1}\n": "expected a mapping with `model:`",
        "model: {}\noptim: {optimizer: adam, lr: 0.1, weight_decay: 0.0}\n": "optim must have exactly the keys",
        "model: {}\noptim: {optimizer: sgd, lr: 0.1, weight_decay: 0.0, max_epochs: 1}\n": "optim.optimizer='sgd'",
        "model: {}\noptim: {optimizer: adam, lr: 0, weight_decay: 0.0, max_epochs: 1}\n": "lr must be a number > 0",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(HparamsError, match=message) as e:
            read(path)
        assert str(path) in str(e.value)
    with pytest.raises(FileNotFoundError, match=r"nope\.yaml: hyperparameter file not found"):
        read(tmp_path / "nope.yaml")
    with pytest.raises(FileNotFoundError, match=r"hparams/protocol/paper\.yaml: the protocol's overlay not found"):
        protocol_overlay(tmp_path, "paper")


def test_a_directory_where_a_hyperparameter_file_belongs_is_named_as_one(tmp_path: Path) -> None:
    (tmp_path / "mmoe.yaml").mkdir()
    with pytest.raises(IsADirectoryError, match=r"mmoe\.yaml: is a directory, not a hyperparameter file"):
        read(tmp_path / "mmoe.yaml")


def test_the_protocol_overlays_are_the_documented_ones() -> None:
    paper = protocol_overlay(ROOT, "paper")
    assert paper["optim"] == {"optimizer": "adam", "weight_decay": 1e-5}
    assert paper["model"] == {"multitab_net": {"multi_token": True, "mask": "t_t"}}
    assert paper["replace"] == {"inter_sample": {"per_sample_mixing": "rope_attention"}}
    assert protocol_overlay(ROOT, "authors_code") == {"optim": {}, "model": {}, "replace": {},
                                                      "file": "hparams/protocol/authors_code.yaml"}
    # a notebook's call and the pipeline's resolve the same way under the one default protocol
    assert load("higgs", "saint", root=ROOT).model["inter_sample"] == "rope_attention"


def test_a_run_without_its_file_fails_with_exit_3_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stages import train as stage

    params = write_tiny_project(tmp_path, models=["stl_mlp"], train={"max_epochs": 1})
    file = tmp_path / "hparams" / "authors" / "tiny" / "stl_mlp.yaml"
    text = file.read_text()
    file.unlink()
    args = ["--run", "real-tiny-stl_mlp-0", "--params", str(params)]
    assert stage.main(args) == BAD_INPUT
    err = capsys.readouterr().err
    assert "hparams/authors/tiny/stl_mlp.yaml: hyperparameter file not found" in err and "Traceback" not in err
    assert not (tmp_path / "results" / "runs").exists()
    # a keyword the model does not take, one missing, one of the wrong type (a file edited after runs.yaml was
    # written, e.g. before a plain `dvc repro`): exit 3, naming the file and the keyword
    cases = {"n_expertz": (2, "model.n_expertz: not a keyword of stl_mlp"),
             "dropout": (None, "model.dropout: missing"),
             "d_embedding": ("fast", "model.d_embedding: expected an integer, got 'fast'")}
    for keyword, (value, message) in cases.items():
        content = yaml.safe_load(text)
        content["model"][keyword] = value
        if value is None:
            del content["model"][keyword]
        file.write_text(yaml.safe_dump(content))
        assert stage.main(args) == BAD_INPUT
        err = capsys.readouterr().err
        assert f"hparams/authors/tiny/stl_mlp.yaml: {message}" in err and "Traceback" not in err, err
    file.write_text(text)
    assert stage.main(args) == 0
