"""A model of the user's own package, declared in params.yaml by import path (params.yaml `models:`): checked against
the model contract by `python -m multitab.models check` and at expansion (one line per failure, exit 3, no
traceback), entered into the registry wherever a registered model goes (the run matrix with its package as its
stages' dependency, the tables after the paper's models labelled as the user's, the complexity table, the sweeps, the
estimator), and refused at load when its declaration is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _own_model import EXAMPLE, KEYWORDS, ROOT, declaration, packages_on_path, project
from multitab.config import ConfigError, load_params
from multitab.models.__main__ import main as models_main
from multitab.registry import REGISTRY, table_order
from multitab.runs.check import check
from multitab.runs.cli import main as runs_main
from multitab.runs.document import document
from multitab.runtime.exit_codes import BAD_INPUT

HPARAMS_FILE = "width: 4"  # broken_nets' one keyword


@pytest.fixture(autouse=True)
def own_packages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    yield from packages_on_path(monkeypatch, tmp_path)


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = models_main(["check", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_example_keeps_the_contract_in_every_check() -> None:
    from own_model.nets import TwoExpertMMoE

    from multitab.models.contract import check_class

    failures, facts = check_class(TwoExpertMMoE, {k: tuple(v) if isinstance(v, list) else v for k, v in
                                                  KEYWORDS.items()})
    assert failures == [] and facts["torch"] and facts["params"] > 0 and facts["flops"] > 0


@pytest.mark.parametrize(("cls", "says"), [
    ("WrongShape", "outputs (mixed features): task 'b' (binary: logits [B]) has shape (10, 1), expected (10,)"),
    ("TaskMissing", "outputs (mixed features): task 'r' missing from the outputs ['b', 'm']"),
    ("NoGradient", "gradients: 2 of 6 parameters get no gradient from the task losses (unused.weight, unused.bias)"),
])
def test_check_refuses_a_broken_model_in_one_line(cls: str, says: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "h.yaml").write_text(f"model: {{{HPARAMS_FILE}}}\n")
    rc, out, err = _check(capsys, f"broken_nets.nets:{cls}", "--hparams", str(tmp_path / "h.yaml"))
    assert rc == BAD_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith(f"broken_nets.nets:{cls}: {says}"), err


def test_a_model_that_trains_itself_is_checked_by_fit_and_predict_and_epochs_must_say_which() -> None:
    from broken_nets.nets import Fine, SelfTrained

    from multitab.models.contract import check_class

    failures, facts = check_class(SelfTrained, {"shrink": 0.5}, epochs=False)
    assert failures == [] and not facts["torch"] and facts["params"] is None
    assert check_class(Fine, {"width": 4}, quick=True, epochs=False)[0] == [
        "epochs: declared false, but Fine is a torch module, which the pipeline trains in epochs: declare "
        "`epochs: true`"]
    assert check_class(SelfTrained, {"shrink": 0.5}, epochs=True)[0][0].startswith("epochs: declared true, but ")


def test_the_command_line_exits_3_with_one_line_and_no_traceback(own_packages: Path, tmp_path: Path) -> None:
    (tmp_path / "h.yaml").write_text(f"model: {{{HPARAMS_FILE}}}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(own_packages), str(ROOT / "src")])}
    r = subprocess.run([sys.executable, "-m", "multitab.models", "check", "broken_nets.nets:TaskMissing", "--hparams",
                        str(tmp_path / "h.yaml")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == BAD_INPUT and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "task 'r' missing" in r.stderr, r.stderr


def test_check_takes_a_declared_models_hyperparameters_and_says_what_cannot_be_imported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # wide enough to memorise a batch of random labels (the overfitting check)
    params = project(tmp_path, {"fine": declaration("broken_nets.nets:Fine", "Fine", {"model": {"width": 64}, "optim": {
        "optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "max_epochs": 3}})}, ["stl_mlp"])
    rc, out, err = _check(capsys, "fine", "--params", str(params))
    assert rc == 0 and err == "" and out.startswith("broken_nets.nets:Fine: keeps the model contract (")
    rc, out, err = _check(capsys, "nowhere.nets:Net")
    assert rc == BAD_INPUT and err == ("error: nowhere.nets:Net: module 'nowhere' not found on the Python path; put "
                                       "the folder that holds its package on PYTHONPATH (or pip install it)\n")
    rc, out, err = _check(capsys, "broken_nets.nets:Fine")  # no file, no declaration: the constructor's defaults
    assert rc == BAD_INPUT and "keyword(s) ['width'] have no default" in err and err.count("\n") == 1


@pytest.mark.parametrize(("cls", "says"), [
    ("WrongShape", "task 'b' (binary: logits [B]) has shape (10, 1)"),
    ("TaskMissing", "task 'r' missing from the outputs"),
    ("NoGradient", "gradients: 2 of 6 parameters get no gradient"),
])
def test_expansion_refuses_a_declared_model_that_breaks_the_contract(
        cls: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hparams = {"model": {"width": 4}, "optim": {"optimizer": "adam", "lr": 0.01, "weight_decay": 0.0, "max_epochs": 3}}
    params = project(tmp_path, {"mine": declaration(f"broken_nets.nets:{cls}", "Mine", hparams)}, ["stl_mlp", "mine"])
    err = _refused(params, capsys)
    assert err.startswith(f"error: {params}: models.mine (broken_nets.nets:{cls}) breaks the model contract: ")
    assert says in err and "`python -m multitab.models check mine` runs every check" in err


def _refused(params: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = params.parent / "runs.yaml"
    capsys.readouterr()
    assert runs_main(["--params", str(params), "--out", str(out)]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists(), err
    return err


def test_expansion_refuses_a_module_that_cannot_be_imported_naming_it(own_packages: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    params = project(tmp_path, {"mine": declaration("nowhere.nets:Net", "Mine")}, ["mine"])
    assert _refused(params, capsys) == (f"error: {params}: models.mine.class: nowhere.nets:Net: module 'nowhere' not "
                                        "found on the Python path; put the folder that holds its package on "
                                        "PYTHONPATH (or pip install it)\n")
    (own_packages / "broken_nets" / "typo.py").write_text("def oops(:\n")
    params.write_text(params.read_text().replace("nowhere.nets:Net", "broken_nets.typo:Net"))
    assert "models.mine.class: broken_nets.typo:Net: importing broken_nets.typo failed: SyntaxError" in \
        _refused(params, capsys)
    params.write_text(params.read_text().replace("broken_nets.typo:Net", "broken_nets.nets:Nope"))
    assert "broken_nets.nets:Nope: module broken_nets.nets (" in _refused(params, capsys)


def test_expansion_refuses_hyperparameters_the_class_does_not_take(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    params = project(tmp_path, {"mine": declaration(hparams={"model": {**KEYWORDS, "d_embedding": "big"},
                                                             "optim": None})}, ["mine"])
    assert _refused(params, capsys) == (f"error: params.yaml: models.mine.hparams: model.d_embedding: expected an "
                                        f"integer, got 'big' ({params}: models.mine)\n")


@pytest.mark.parametrize(("entry", "says"), [
    ({"class": "own_model/nets.py", "label": "X", "hparams": {"model": {}}}, "models.x.class: 'own_model/nets.py' is "
     "not an import path"),
    ({"class": "a.b:C", "label": "MMoE", "hparams": {"model": {}}}, "models.x.label: 'MMoE' is the label of mmoe"),
    ({"class": "a.b:C", "label": "X", "hparams": "hparams/authors/higgs/mmoe.yaml"}, "is inside hparams/"),
    ({"class": "a.b:C", "label": "X", "hparams": {"model": {}}, "epochs": "yes"}, "models.x.epochs: expected "
     "true/false"),
    ({"label": "X", "hparams": {"model": {}}}, "models.x: missing key 'class'"),
])
def test_a_wrong_declaration_is_refused_at_load_naming_the_key(entry: dict, says: str, tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"models": {"x": entry}}))
    with pytest.raises(ConfigError, match="models") as e:
        load_params(path)
    assert says in str(e.value)
    path.write_text(yaml.safe_dump({"models": {"mmoe": {"class": "a.b:C", "label": "Y", "hparams": {"model": {}}}}}))
    with pytest.raises(ConfigError, match="models.mmoe: mmoe is a model of the registry"):
        load_params(path)
    path.write_text(yaml.safe_dump({"models": {"my-net": {"class": "a.b:C", "label": "Y", "hparams": {"model": {}}}}}))
    with pytest.raises(ConfigError, match="models: 'my-net' goes into DVC stage names"):
        load_params(path)


def test_its_runs_depend_on_its_package_and_read_its_declared_hyperparameters(own_packages: Path,
                                                                              tmp_path: Path) -> None:
    inline = declaration()
    in_file = declaration(hparams="own/two_expert.yaml", label="From a file")
    params = project(tmp_path, {"two_expert": inline, "filed": in_file}, ["stl_mlp", "two_expert", "filed"])
    (params.parent / "own").mkdir()
    (params.parent / "own" / "two_expert.yaml").write_text(yaml.safe_dump({"model": KEYWORDS, "optim": None}))
    with pytest.raises(ConfigError, match=r"own/two_expert.yaml: optim: missing: filed trains with an optimiser"):
        check(load_params(params), ["real"], params.parent)
    (params.parent / "own" / "two_expert.yaml").write_text(yaml.safe_dump({"model": KEYWORDS, "optim": {
        **inline["hparams"]["optim"], "lr": 0.01}}))
    runs = document(load_params(params))["train_runs"]
    package = (EXAMPLE / "own_model").as_posix()  # outside the project: absolute
    assert runs["real-acs_income-stl_mlp-0"]["model_code"] == "src/multitab/models"
    assert runs["real-acs_income-stl_mlp-0"]["hparams_file"] == "hparams/authors/acs_income/stl_mlp.yaml"
    mine, filed = runs["real-acs_income-two_expert-0"], runs["real-acs_income-filed-0"]
    assert mine["model_code"] == package and mine["hparams_file"] == package
    assert mine["hparams"]["file"] == "params.yaml: models.two_expert.hparams"
    assert mine["hparams"]["model"] == KEYWORDS
    # protocol `paper` lays its optimiser over every model's, the user's too (Adam, weight decay 1e-5)
    assert mine["hparams"]["optim"] == {**inline["hparams"]["optim"], "weight_decay": 1e-05}
    assert filed["model_code"] == package and filed["hparams_file"] == "own/two_expert.yaml"
    assert filed["hparams"]["file"] == "own/two_expert.yaml" and filed["hparams"]["optim"]["lr"] == 0.01
    # a package inside the project: relative to it
    inside = params.parent / "code"
    (inside / "own_model").mkdir(parents=True)
    for f in (EXAMPLE / "own_model").glob("*.py"):
        (inside / "own_model" / f.name).write_text(f.read_text())
    sys.path.insert(0, str(inside))
    try:
        from _own_model import forget

        forget()
        runs = document(load_params(params))["train_runs"]
        assert runs["real-acs_income-two_expert-0"]["model_code"] == "code/own_model"
    finally:
        sys.path.remove(str(inside))


def test_a_sweep_group_sweeps_it_on_its_grid(tmp_path: Path) -> None:
    sweep = {"sweep": "mlp", "data": {"datasets": ["acs_income"]}, "models": ["two_expert"], "seeds": [0],
             "train": {}, "grid": {"lr": [0.01, 0.1], "dropout": [0.0, 0.2]}, "opt_in": True,
             "out": "results/sweep_runs", "checkpoints": "results/sweep_checkpoints"}
    params = project(tmp_path, {"two_expert": declaration()}, ["stl_mlp"], sweep_mine=sweep)
    assert runs_main(["--params", str(params), "--out", str(params.parent / "runs.yaml"), "--groups",
                      "sweep_mine"]) == 0
    runs = yaml.safe_load((params.parent / "runs.yaml").read_text())["train_runs"]
    point = runs["sweep_mine-acs_income-two_expert-lr0_1-dropout0_2-0"]["hparams"]
    assert point["model"]["dropout"] == 0.2 and point["optim"]["lr"] == 0.1 and point["source"] == "grid point"


def test_the_tables_list_it_after_the_papers_models_labelled_as_the_users(tmp_path: Path) -> None:
    from _aggregate_fakes import published_runs, write_run
    from multitab.evaluation.paper.paper_tables import table3
    from multitab.evaluation.paper.published import load_published
    from multitab.evaluation.paper.results import PaperResults
    from multitab.evaluation.paper.runs import RunSet, load_runs

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["models"] = {"two_expert": declaration()}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load_params(tmp_path / "params.yaml").aggregate
    assert table_order()[-1] == "two_expert" and REGISTRY["two_expert"].label == "Two-expert MMoE (user)"
    runs = tmp_path / "runs"
    published_runs(runs, seeds=(0,), noise=0.0)
    for d in ("aliexpress", "acs_income", "higgs"):
        record = json.loads((runs / d / "mmoe" / "seed0" / "metrics.json").read_text())
        write_run(runs, d, "two_expert", 0, record["test"], record["task_types"], test_mse=record["test_mse"])
    t3 = table3(PaperResults(RunSet(load_runs(runs)), config, load_published()))
    rows = [str(r[0]) for r in t3.rows]
    assert rows[:10] == ["STL", "MTL", "MMoE", "PLE", "TabT", "FT-T", "SAINT", "XGB", "STEM", "MultiTab-Net"]
    assert rows[-1] == "Two-expert MMoE (user)" and all(c.value is not None for c in t3.rows[-1][1:])
    load_params(ROOT / "params.yaml")  # another params file: its own declarations (none) replace these
    assert "two_expert" not in REGISTRY


def test_the_complexity_table_counts_it_with_its_declared_hyperparameters(tmp_path: Path) -> None:
    from _training_tiny import write_tiny_processed
    from multitab.config import ComplexityConfig
    from multitab.datasets.schema import schema_from_meta
    from multitab.models import build_model
    from multitab.models.counting import complexity
    from stages.complexity import write_tables

    params = project(tmp_path, {"two_expert": declaration()}, ["stl_mlp"])
    load_params(params)
    meta = write_tiny_processed(tmp_path / "processed" / "tiny", n={"train": 20, "val": 10, "test": 10})
    write_tables([tmp_path / "processed" / "tiny" / "meta.json"], tmp_path / "out" / "complexity",
                 ComplexityConfig(batch_size=1), "paper", params.parent)
    table = pd.read_csv(tmp_path / "out" / "complexity.csv")
    assert list(table.model)[-1] == "two_expert"
    schema = schema_from_meta(meta)
    reference = complexity(build_model("two_expert", schema, {k: tuple(v) if isinstance(v, list) else v
                                                              for k, v in KEYWORDS.items()}), schema)
    assert table.set_index("model").loc["two_expert", "params"] == reference["params"]


def test_the_estimator_takes_an_import_path() -> None:
    from multitab import MultiTaskEstimator

    frame = pd.DataFrame({"age": [float(i % 17) for i in range(120)], "job": ["a", "b", "c"] * 40})
    targets = pd.DataFrame({"click": [i % 2 for i in range(120)], "spend": [i / 7 for i in range(120)]})
    small = {**KEYWORDS, "expert_d_hidden": [8], "tower_d_hidden": 4}
    est = MultiTaskEstimator("own_model.nets:TwoExpertMMoE", model_params=small, max_epochs=2, batch_size=32)
    est.fit(frame, targets)
    assert type(est.model_).__name__ == "TwoExpertMMoE" and est.predict(frame).shape == (120, 2)
    assert est.hparams_["file"] == "own_model.nets:TwoExpertMMoE (constructor defaults)"
    with pytest.raises(ValueError, match="model.d_embedding: missing"):
        MultiTaskEstimator("own_model.nets:TwoExpertMMoE", max_epochs=1).fit(frame, targets)


def test_the_committed_toy_record_names_the_example_as_the_model_under_test() -> None:
    """results/study/own_model_toy_1cfg_3seeds: the attribution ladder with the example as its claim's model (1
    configuration x 3 seeds, toy scale); test_bench_study.py regenerates it byte for byte from its CSVs and claim."""
    record = ROOT / "results" / "study" / "own_model_toy_1cfg_3seeds"
    claim = json.loads((record / "claim.json").read_text())
    assert claim["model"] == "two_expert" and claim["labels"]["two_expert"] == "Two-expert MMoE (user)"
    ladder = pd.read_csv(record / "ladder.csv")
    assert sorted(set(ladder.config)) == ["p06_pd3_t3"] and len(ladder) == 2
    assert set(ladder.verdict) <= {"holds", "does not hold", "inconclusive"}
    metrics = pd.read_csv(record / "metrics.csv")
    assert sorted(metrics.seed.unique()) == [0, 1, 2] and "two_expert" in set(metrics.model)
    section = (record / "section.md").read_text()
    assert "## MultiTab-Bench attribution: which choice decides the claim on Two-expert MMoE (user)" in section
    assert "(Two-expert MMoE (user) significantly above every rival at α 0.05)" in section
    assert "| Arm | Whose | Changes | Two-expert MMoE (user) Δm |" in (record / "ladder.md").read_text()
    header = (record / "header.md").read_text()
    assert "- Commit: `" in header and " CPUs, Linux." in header and "wall time" in header
