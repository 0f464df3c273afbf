"""Stage `icl` on a tiny processed dataset: with random-weight checkpoints in the released formats (a test of
the plumbing: these numbers are no model's result) and without any checkpoint (every task "not run")."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

from _icl_tiny import orion_file, tabicl_file, write_icl_params
from _training_tiny import write_tiny_processed
from stages import icl as stage

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(tmp_path, checkpoints, *, datasets=("acs_income",), **over):
    """The stage on tmp_path/processed (and tmp_path/synthetic) with the given locked checkpoint files."""
    params, lock_file = write_icl_params(tmp_path, checkpoints, datasets=list(datasets), **over)
    return stage.main(["--params", str(params), "--data", str(tmp_path / "processed"),
                       "--synthetic", str(tmp_path / "synthetic"), "--lock", str(lock_file),
                       "--out", str(tmp_path / "out")])


def test_with_checkpoints_every_task_gets_a_record(tmp_path, caplog):
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 80, "val": 30, "test": 30})
    orion, orion_sha = orion_file(tmp_path)
    cls, cls_sha = tabicl_file(tmp_path, regression=False)
    reg, reg_sha = tabicl_file(tmp_path, regression=True)
    with caplog.at_level(logging.INFO, logger="multitab.icl.run"):
        assert _run(tmp_path, {"orion_msp": (orion, orion_sha), "tabicl": (cls, cls_sha),
                               "tabicl_regressor": (reg, reg_sha)}) == 0
    assert ("acs_income orion_msp seed 0, task marital: 60 val+test rows predicted from 50 context rows x 2 view(s)"
            in caplog.text)
    out = tmp_path / "out"
    orion_record = json.loads((out / "acs_income/orion_msp/seed0/metrics.json").read_text())
    assert orion_record["status"] == {"click": "ok", "marital": "ok", "m_jj": "not applicable"}
    assert set(orion_record["test"]) == {"click", "marital"}
    assert orion_record["checkpoints"] == {"orion_msp": {"path": str(orion), "sha256": orion_sha}}
    assert orion_record["context"] == {"rule": "uniform", "size": 50, "rows_used": 50, "train_rows": 80}
    assert orion_record["kind"] == "pretrained, no training on this dataset"
    assert (orion_record["profile"], orion_record["device"], orion_record["n_estimators"]) == ("cpu", "cpu", 2)
    tabicl_record = json.loads((out / "acs_income/tabicl/seed0/metrics.json").read_text())
    assert tabicl_record["status"] == {"click": "ok", "marital": "ok", "m_jj": "ok"}
    assert set(tabicl_record["checkpoints"]) == {"tabicl", "tabicl_regressor"}
    summary = (out / "summary.md").read_text()
    assert orion_sha in summary and "m_jj: not applicable" in summary and "not run" not in summary
    assert "Profile `cpu` on cpu" in summary


def test_a_profile_with_eval_rows_scores_a_sample_of_each_split_and_says_so(tmp_path, caplog):
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 80, "val": 30, "test": 30})
    orion, orion_sha = orion_file(tmp_path)
    profiles = {"cpu": {"context_size": 50, "chunk_size": 16, "eval_rows": 12,
                        "n_estimators": {"orion_msp": 1, "tabicl": 1}},
                "gpu": {"context_size": None, "chunk_size": None, "eval_rows": None,
                        "n_estimators": {"orion_msp": 32, "tabicl": 8}}}
    with caplog.at_level(logging.INFO, logger="multitab.icl.run"):
        assert _run(tmp_path, {"orion_msp": (orion, orion_sha), "tabicl": None}, profiles=profiles) == 0
    assert "task marital: 24 val+test rows predicted from 50 context rows" in caplog.text
    record = json.loads((tmp_path / "out/acs_income/orion_msp/seed0/metrics.json").read_text())
    assert record["eval_rows"] == {"at_most": 12, "splits": {"val": {"scored": 12, "rows": 30},
                                                             "test": {"scored": 12, "rows": 30}}}
    assert set(record["test"]) == {"click", "marital"}
    assert "at most 12 val and test rows scored per split" in (tmp_path / "out" / "summary.md").read_text()


def test_without_checkpoints_nothing_runs_and_the_summary_says_how_to_get_one(tmp_path):
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    assert _run(tmp_path, {"orion_msp": None, "tabicl": None}) == 0
    for model in ("orion_msp", "tabicl"):
        record = json.loads((tmp_path / f"out/acs_income/{model}/seed0/metrics.json").read_text())
        assert set(record["status"].values()) <= {"not run: no checkpoint", "not applicable"}
        assert record["test"] == {} and record["checkpoints"] == {}
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "not run: no checkpoint" in summary and "make icl-weights" in summary
    assert "icl.lock has no orion_msp" in summary


def test_a_wrong_checkpoint_stops_the_stage_with_one_line(tmp_path, capsys):
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    orion, _ = orion_file(tmp_path)
    assert _run(tmp_path, {"orion_msp": (orion, "0" * 64), "tabicl": None}) == 3
    assert "expected sha256 " + "0" * 64 in capsys.readouterr().err


def test_a_lock_for_other_files_than_params_name_stops_the_stage(tmp_path, capsys):
    """params.yaml names another file than the lock holds (a pin changed after the fetch): one line, exit 3."""

    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    orion, sha = orion_file(tmp_path)
    params, lock_file = write_icl_params(tmp_path, {"orion_msp": (orion, sha), "tabicl": None}, datasets=["acs_income"])
    raw = yaml.safe_load(params.read_text())
    raw["icl"]["checkpoints"]["orion_msp"]["sha256"] = "a" * 64
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert stage.main(["--params", str(params), "--data", str(tmp_path / "processed"), "--lock", str(lock_file),
                       "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"has sha256 {sha}, params.yaml pins {'a' * 64}" in err
    assert "make icl-weights" in err


def test_more_classes_than_the_checkpoint_takes_go_through_the_hierarchy(tmp_path):
    tasks = [{"name": "marital", "type": "multiclass", "n_classes": 6}]
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 60, "val": 12, "test": 12}, tasks=tasks)
    orion, sha = orion_file(tmp_path)  # max_classes 4
    assert _run(tmp_path, {"orion_msp": (orion, sha), "tabicl": None}) == 0
    record = json.loads((tmp_path / "out/acs_income/orion_msp/seed0/metrics.json").read_text())
    assert record["status"] == {"marital": "ok"} and 0.0 <= record["test"]["marital"] <= 1.0


def test_multitab_bench_configurations_run_through_tabicls_regressor(tmp_path):
    """A key of bench.configs in icl.datasets reads that configuration's synthetic data: its regression tasks
    through TabICL's regressor, Orion-MSP "not applicable"; the summary shows them in their own section."""
    tasks = [{"name": n, "type": "regression", "n_classes": None} for n in ("y1", "y2", "y3")]
    write_tiny_processed(tmp_path / "synthetic" / "p06_pd3_t3", n={"train": 60, "val": 12, "test": 12}, tasks=tasks)
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    orion, orion_sha = orion_file(tmp_path)
    reg, reg_sha = tabicl_file(tmp_path, regression=True)
    assert _run(tmp_path, {"orion_msp": (orion, orion_sha), "tabicl": None, "tabicl_regressor": (reg, reg_sha)},
                datasets=["acs_income", "p06_pd3_t3"]) == 0
    tabicl = json.loads((tmp_path / "out/p06_pd3_t3/tabicl/seed0/metrics.json").read_text())
    assert tabicl["status"] == {"y1": "ok", "y2": "ok", "y3": "ok"} and set(tabicl["test"]) == {"y1", "y2", "y3"}
    orion_record = json.loads((tmp_path / "out/p06_pd3_t3/orion_msp/seed0/metrics.json").read_text())
    assert set(orion_record["status"].values()) == {"not applicable"}
    summary = (tmp_path / "out" / "summary.md").read_text()
    bench = summary[summary.index("## MultiTab-Bench"):]
    assert "| p06_pd3_t3 | tabicl | 0 | y1: " in bench and "| acs_income |" not in bench
    assert "results/report.md" in bench


def test_a_dataset_that_is_neither_real_nor_multitab_bench_is_named(tmp_path, capsys):
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    assert _run(tmp_path, {"orion_msp": None, "tabicl": None}, datasets=["acs_incme"]) == 3
    err = capsys.readouterr().err
    assert "icl.datasets: 'acs_incme' is not a dataset (datasets:) or a MultiTab-Bench config" in err
    assert "p06_pd3_t3" in err and len(err.strip().splitlines()) == 1


def test_table3_rows_say_pretrained_and_not_run_without_a_checkpoint(tmp_path):
    from _aggregate_fakes import published_runs
    from multitab.config import load_params
    from multitab.evaluation.paper.paper_tables import table3
    from multitab.evaluation.paper.published import load_published
    from multitab.evaluation.paper.results import PaperResults
    from multitab.evaluation.paper.runs import RunSet, load_runs
    from multitab.icl.records import read_records

    published_runs(tmp_path / "runs", seeds=(0,), noise=0.0, standin=False)
    aggregate = load_params(Path(__file__).resolve().parents[1] / "params.yaml").aggregate
    results = PaperResults(RunSet(load_runs(tmp_path / "runs")), aggregate, load_published())
    icl = tmp_path / "icl"
    base = {"seed": 0, "kind": "pretrained, no training on this dataset", "val": {}}
    for model in ("orion_msp", "tabicl"):
        (icl / "aliexpress" / model / "seed0").mkdir(parents=True)
    (icl / "aliexpress/orion_msp/seed0/metrics.json").write_text(json.dumps({
        **base, "dataset": "aliexpress", "model": "orion_msp", "status": {"click": "ok", "conversion": "ok"},
        "test": {"click": 0.7, "conversion": 0.8}, "checkpoints": {"orion_msp": {"path": "x", "sha256": "ab" * 32}}}))
    (icl / "aliexpress/tabicl/seed0/metrics.json").write_text(json.dumps({
        **base, "dataset": "aliexpress", "model": "tabicl", "test": {}, "checkpoints": {},
        "status": {"click": "not run: no checkpoint", "conversion": "not run: no checkpoint"}}))
    table = table3(results, read_records(icl))
    rows = {r[0]: r for r in table.rows}
    orion = rows["Orion-MSP (pretrained, no training on this dataset)"]
    assert orion[1].value == pytest.approx(70.0) and orion[2].value == pytest.approx(80.0)
    assert orion[3].value is not None  # Δm against STL, as for every row
    tabicl = rows["TabICL (pretrained, no training on this dataset)"]
    assert tabicl[1].text() == "not run: no checkpoint" and tabicl[3].text() == "n/a"
    text = table.to_markdown()
    assert "ab" * 32 in text and "TabICL: pretrained, no training on this dataset; not run: no checkpoint" in text
    assert len(table.rows) == len(table3(results).rows) + 2


@pytest.mark.parametrize("model", ["orion_msp", "tabicl"])
def test_a_file_that_is_no_checkpoint_is_one_line_naming_it_and_bad_input(tmp_path, capsys, model):
    """Random bytes, a checkpoint cut short, one whose pickle would run code, and a directory, each pinned by
    its own sha256 (any, for the directory): the stage ends with BAD_INPUT and one line naming the file
    and why, never PyTorch's advice to load it with `weights_only=False` (which would run the code); nothing
    in the file runs. TabICL's checkpoints used to go through the package's own loader: an unpickling error
    with a traceback (exit 1, retried) or an assertion."""
    import hashlib

    from _bad_checkpoints import WHY, bad_checkpoints
    from multitab.runtime.exit_codes import BAD_INPUT

    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    good = torch.load(orion_file(tmp_path)[0] if model == "orion_msp" else tabicl_file(tmp_path, False)[0],
                      weights_only=True)
    marker = tmp_path / "marker"
    for kind, path in bad_checkpoints(tmp_path / "bad", good, marker).items():
        sha = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "0" * 64
        try:
            code = _run(tmp_path, {"orion_msp": (path, sha) if model == "orion_msp" else None,
                                   "tabicl": (path, sha) if model == "tabicl" else None}, models=[model])
        except Exception as e:  # noqa: BLE001 - a traceback: the failure this test is about
            code = f"raised {type(e).__name__}: {e}"
        err = capsys.readouterr().err.strip()
        assert code == BAD_INPUT, (kind, code, err)
        assert len(err.splitlines()) == 1 and str(path) in err and WHY[kind] in err, (kind, err)
        assert "weights_only" not in err, (kind, err)
    assert not marker.exists()


def test_the_profile_is_picked_by_device(tmp_path, monkeypatch, capsys):
    """`device: auto` runs on CUDA when torch sees one, and `profile: auto` then takes the gpu profile (the
    released settings); on a machine without CUDA, `device: cuda` is one line and exit 3."""
    from multitab.config import load_params

    params, _ = write_icl_params(tmp_path, {"orion_msp": None, "tabicl": None}, datasets=["acs_income"],
                                 device="auto")
    config = load_params(params).icl
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert stage.device_of(config.device).type == "cuda"
    assert config.settings("cuda") == ("gpu", config.profiles["gpu"]) and config.profiles["gpu"].context_size is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert stage.device_of(config.device).type == "cpu" and config.settings("cpu")[0] == "cpu"
    forced = load_params(write_icl_params(tmp_path, {"orion_msp": None, "tabicl": None}, datasets=["acs_income"],
                                          device="auto", profile="gpu")[0]).icl
    assert forced.settings("cpu")[0] == "gpu"
    write_tiny_processed(tmp_path / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    assert _run(tmp_path, {"orion_msp": None, "tabicl": None}, device="cuda") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "icl.device is 'cuda' but torch sees no CUDA device" in err
