"""Runs that reached their epoch cap still improving, continued until early stopping ends them
(stages/continue_runs.py): on a tiny model, the continuation equals the run trained under the large budget from
the start (same process, same CPU), from the capped run's checkpoint or from scratch; a record takes the
continuations in place of the capped runs (multitab.evaluation.bench.continued), and refuses one that is not
a continuation of its run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from tests._training_tiny import register_tiny, write_tiny_processed, write_tiny_project

from multitab.config.aggregate import SyntheticConfig
from multitab.evaluation.bench.continued import at_cap, continued_rows
from multitab.evaluation.bench.numbers import StudyError, run_rows
from multitab.evaluation.bench.same_results import run_files, tsv_curve
from stages import continue_runs, first_epoch_check
from stages import train as train_stage

torch.set_num_threads(1)
KEY = "real-tiny-tiny-0"
RUN = Path("results/runs/tiny/tiny/seed0")
CHECKPOINT = Path("results/checkpoints/tiny/tiny/seed0")
CONTINUED = Path("results/study/continued/tiny/tiny/seed0")
FIELDS = ("test", "val", "test_mse", "best_epoch", "epochs", "stopped_early")
CAP, SAFETY = 3, 60


@pytest.fixture(autouse=True)
def _tiny_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "tiny"
    write_tiny_processed(path)
    return path


def _project(root: Path, tiny: Path, max_epochs: int) -> Path:
    params = write_tiny_project(root, data=tiny, train={"max_epochs": max_epochs, "patience": {"default": 2},
                                                        "batch_size": 128})
    assert train_stage.main(["--run", KEY, "--params", str(params)]) == 0
    return params


def _curves(run_dir: Path) -> dict[str, dict[int, float]]:
    files = run_files(run_dir)
    return {c: tsv_curve(files[f"dvclive/{c}.tsv"]) for c in ("val_mean", "train_loss", "val_click")}


def test_a_capped_run_continued_equals_the_run_without_a_binding_cap(tiny: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    uncapped = _project(tmp_path / "uncapped", tiny, SAFETY).parent  # the paper's rule: the cap never binds
    free = json.loads((uncapped / RUN / "metrics.json").read_text())
    assert free["stopped_early"] and CAP < free["epochs"] < SAFETY  # patience ends it, well past the small cap
    root = _project(tmp_path / "capped", tiny, CAP).parent
    params = str(root / "params.yaml")
    capped = json.loads((root / RUN / "metrics.json").read_text())
    assert capped["epochs"] == CAP and not capped["stopped_early"]
    own_checkpoint = (root / CHECKPOINT / "last.pt").read_bytes()
    assert continue_runs.main(["list", "--runs", "real-*", "--params", params]) == 0
    assert f"{KEY}: {CAP} of {CAP} epochs" in capsys.readouterr().out
    assert continue_runs.main(["run", "--runs", "real-*", "--safety-cap", str(SAFETY), "--params", params]) == 0
    continued = json.loads((root / CONTINUED / "metrics.json").read_text())
    assert {f: continued[f] for f in FIELDS} == {f: free[f] for f in FIELDS}
    assert _curves(root / CONTINUED) == _curves(uncapped / RUN)
    info = json.loads((root / CONTINUED / "continuation.json").read_text())
    assert info["start"] == "resumed from the capped run's own checkpoint" and continued["resumed_from_epoch"] == CAP
    assert info["first_epochs"] == {"epochs": CAP, "curves": ["val_mean", "train_loss"], "precision": "exact",
                                    "identical": True, "first_difference": None}
    assert info["original"]["epochs"] == CAP and info["safety_cap"] == SAFETY and info["result"]["stopped_early"]
    assert (root / CHECKPOINT / "last.pt").read_bytes() == own_checkpoint  # the capped run's stays its own
    # continued once: a second call trains nothing
    before = (root / CONTINUED / "metrics.json").read_bytes()
    capsys.readouterr()
    assert continue_runs.main(["run", "--runs", "real-*", "--safety-cap", str(SAFETY), "--params", params]) == 0
    assert (root / CONTINUED / "metrics.json").read_bytes() == before and "first_epochs" not in capsys.readouterr().out


def _record(root: Path, folder: Path) -> Path:
    """A one-arm record of the tiny project's run (its metrics and curves rows, as an attribution record holds
    them, the run folder relative to the group's runs folder)."""
    conf = SyntheticConfig("tiny", ("count",), 0.6, (3, 3, 3))
    rows = run_rows(root / RUN, conf, "tiny", "tiny", 0)
    assert rows is not None
    folder.mkdir()
    pd.DataFrame([{"arm": "A", "run": "tiny/tiny/seed0", **r} for r in rows[0]]).to_csv(
        folder / "metrics.csv", index=False, float_format="%.6g")
    pd.DataFrame([{"arm": "A", **r} for r in rows[1]]).to_csv(folder / "curves.csv", index=False, float_format="%.6g")
    return folder


def test_a_records_capped_run_without_its_checkpoint_is_trained_again_and_taken_in_its_place(
        tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    uncapped = _project(tmp_path / "uncapped", tiny, SAFETY).parent
    root = _project(tmp_path / "capped", tiny, CAP).parent
    record = _record(root, tmp_path / "record")
    shutil.rmtree(root / CHECKPOINT)  # a later session: the checkpoints stayed on another machine
    metrics, curves = pd.read_csv(record / "metrics.csv"), pd.read_csv(record / "curves.csv")
    assert at_cap(metrics) == ["tiny/tiny/seed0"]
    # --runs keeps the record's capped runs whose key matches: none here, so nothing is trained
    assert continue_runs.main(["run", "--record", str(record), "--runs", "attribution-*", "--params",
                               str(root / "params.yaml")]) == 0
    assert "0 capped run(s)" in capsys.readouterr().out and not (root / CONTINUED).exists()
    assert continue_runs.main(["run", "--record", str(record), "--runs", "real-*", "--safety-cap", str(SAFETY),
                               "--params", str(root / "params.yaml")]) == 0
    info = json.loads((root / CONTINUED / "continuation.json").read_text())
    assert info["start"] == "trained from scratch (no usable checkpoint of the capped run)"
    assert info["kernels"] == continue_runs.kernels() and info["kernels"].startswith("PyTorch CPU capability ")
    assert info["first_epochs"]["precision"] == "6 significant digits" and info["first_epochs"]["identical"]
    assert _curves(root / CONTINUED) == _curves(uncapped / RUN)
    # the record takes the continuation in place of the capped run, and says so
    merged, merged_curves, lines = continued_rows(metrics, curves, root / "results/study/continued")
    free = json.loads((uncapped / RUN / "metrics.json").read_text())
    assert set(merged["epochs"]) == {free["epochs"]} and at_cap(merged) == []
    assert len(merged_curves) == free["epochs"] and len(merged) == len(metrics)
    assert lines[0].startswith("- Continued past their epoch cap, until early stopping or the safety cap ended them "
                               "(1 run(s)")
    assert f"{CAP} of {CAP} epochs" in lines[1] and "trained from scratch" in lines[1]
    assert f"on {info['cpu']} ({info['kernels']}) under a safety cap" in lines[1]
    for name in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # a cap is named (read from the environment; nothing trains)
    assert continue_runs.kernels().endswith("; ISA caps: ONEDNN_MAX_CPU_ISA=AVX2")
    assert f"ended by early stopping after {free['epochs']} epochs" in lines[1]
    # a continuation whose first epochs are not the capped run's is another run: refused
    info["first_epochs"] |= {"identical": False, "first_difference": {"epoch": 2}}
    (root / CONTINUED / "continuation.json").write_text(json.dumps(info))
    with pytest.raises(StudyError, match="another run, not its continuation"):
        continued_rows(metrics, curves, root / "results/study/continued")
    # ... unless the record is told to take a run trained again from scratch (other kernels), and then it says so
    info["first_epochs"]["first_difference"] |= {"curve": "val_mean", "capped": 0.5, "continued": 0.6}
    (root / CONTINUED / "continuation.json").write_text(json.dumps(info))
    again, _, again_lines = continued_rows(metrics, curves, root / "results/study/continued", retrained=True)
    assert at_cap(again) == [] and set(again["epochs"]) == {free["epochs"]}
    assert "1 of them trained again from scratch on other kernels rather than continued" in again_lines[0]
    assert "NOT the capped run continued" in again_lines[1] and "parting at epoch 2 (val_mean 0.5 there, 0.6 here)" \
        in again_lines[1] and "; trained again at `" in again_lines[1] and " epochs repeat " not in again_lines[1]
    resumed = info | {"start": "resumed from the capped run's own checkpoint"}  # a resumed run is not trained again
    (root / CONTINUED / "continuation.json").write_text(json.dumps(resumed))
    with pytest.raises(StudyError, match="another run, not its continuation"):
        continued_rows(metrics, curves, root / "results/study/continued", retrained=True)
    info["first_epochs"]["identical"] = True
    info["original"]["epochs"] = CAP + 1
    (root / CONTINUED / "continuation.json").write_text(json.dumps(info))
    with pytest.raises(StudyError, match="continues a run of 4 epochs"):
        continued_rows(metrics, curves, root / "results/study/continued")


def test_the_first_epoch_check_says_whether_this_machine_trains_the_records_run(tiny: Path, tmp_path: Path) -> None:
    """stages/first_epoch_check.py: a run trained here again for one epoch repeats the record's first epoch; a
    record whose epoch 1 is not what this code trains is reported as different; section.md comes from the files."""
    root = _project(tmp_path / "capped", tiny, CAP).parent
    record = _record(root, tmp_path / "record")
    params = str(root / "params.yaml")
    args = ["run", "--record", str(record), "--seed", "0", "--configs", "tiny", "--params", params]
    assert first_epoch_check.main([*args, "--to", str(tmp_path / "check"), "--note", "tiny"]) == 0
    table = pd.read_csv(tmp_path / "check" / "results.csv")
    assert len(table) == 1 and bool(table["same"].iloc[0])
    header = (tmp_path / "check" / "header.md").read_text()
    assert header.startswith("> tiny") and "PyTorch CPU capability" in header
    section = (tmp_path / "check" / "section.md").read_text()
    assert section.startswith("## First epoch trained again: check") and "**1 of 1 runs repeat" in section
    (tmp_path / "check" / "section.md").unlink()
    assert first_epoch_check.main(["section", str(tmp_path / "check")]) == 0
    assert (tmp_path / "check" / "section.md").read_text() == section
    curves = pd.read_csv(record / "curves.csv")
    curves.loc[curves["epoch"] == 1, "train_loss"] *= 1.001  # another machine's epoch 1
    curves.to_csv(record / "curves.csv", index=False, float_format="%.6g")
    assert first_epoch_check.main([*args, "--to", str(tmp_path / "check2")]) == 0
    assert not bool(pd.read_csv(tmp_path / "check2" / "results.csv")["same"].iloc[0])
    assert "**0 of 1 runs repeat" in (tmp_path / "check2" / "section.md").read_text()
    # a configuration the record lacks: a one-line error, nothing written
    assert first_epoch_check.main([*args[:6], "absent", "--params", params, "--to", str(tmp_path / "c3")]) != 0
    assert not (tmp_path / "c3").exists()
