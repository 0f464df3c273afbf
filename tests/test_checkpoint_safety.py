"""Checkpoints that cannot run code, a corrupt best.pt that a re-run recovers from, a full disk that ends
the stage with one clear line and resumes once space is freed, and a resume fingerprint that holds the
settings that change numbers."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _toy_dvc import real_train_project
from _training_tiny import TINY_HPARAMS, register_tiny, train_run, write_tiny_processed, write_tiny_project
from multitab.config.train import TrainConfig
from multitab.files import io as mio
from multitab.training import checkpoint as ckpt
from multitab.training import loop as loop_mod
from multitab.training.run import RunSpec, model_code_version

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
TIMING = {"epoch_seconds", "data_seconds", "samples_per_second", "train_seconds", "resumed_from_epoch"}


def make_config(**kw: object) -> TrainConfig:
    base: dict[str, object] = dict(
        device="cpu", precision="fp32", compile=False,
        deterministic=True, num_threads=1, batch_size=128, max_epochs=4, max_train_rows=None,
        patience={"default": 5}, xgboost_early_stopping_rounds=5, progress=False,
    )
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _tiny_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in TIMING}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processed") / "tiny"
    write_tiny_processed(path)
    return path


def _train(tiny: Path, ck: Path, **config: object) -> tuple[dict[str, Any], list[dict[str, float]]]:
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=ck)
    return train_run(spec, make_config(**config), TINY_HPARAMS)


# ------------------------------------------------------------------------------ nothing loaded runs code
class Payload:
    """Unpickling this runs code: it writes `marker` (stands for whatever an attacker would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_malicious_checkpoint_is_refused_and_nothing_runs(
    tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ck = tmp_path / "ck"
    clean, _ = _train(tiny, ck)
    marker = tmp_path / "marker"
    for name in (ckpt.LAST, ckpt.BEST):  # right fingerprint and keys: only the payload is foreign
        good = torch.load(ck / name, weights_only=True)
        torch.save({**good, "model": Payload(marker)}, ck / name)
    with caplog.at_level(logging.WARNING):
        again, _ = _train(tiny, ck)
    assert not marker.exists()
    assert "refused" in caplog.text and "could run code" in caplog.text and "GLOBAL exec" in caplog.text
    assert "weights_only" not in caplog.text  # PyTorch's advice to load it unsafely is never repeated
    assert again["resumed_from_epoch"] == 0 and _strip(again) == _strip(clean)  # trained afresh, same numbers
    # the crafted file is live: loading it the old way (weights_only=False) runs its code
    bad = tmp_path / "bad.pt"
    torch.save({"model": Payload(marker)}, bad)
    torch.load(bad, weights_only=False)
    assert marker.read_text() == "ran"


def test_a_file_that_is_no_checkpoint_is_one_warning_line_naming_it(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint of random bytes, cut short, whose pickle would run code, or a directory where the file
    belongs (it used to pass as "missing", silently): one warning line naming the file and why the run
    starts from scratch, never PyTorch's advice to load it with `weights_only=False`; nothing in it runs.
    The same reader as the pretrained models' checkpoints (multitab.files.checkpoint)."""
    from _bad_checkpoints import WHY, bad_checkpoints

    marker = tmp_path / "marker"
    good = {**ckpt.identity("f" * 64, None), "epoch": 1, "model": {"w": torch.ones(2)}}
    for kind, path in bad_checkpoints(tmp_path / "bad", good, marker).items():
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert ckpt.load(path, "f" * 64) is None
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"{path}: checkpoint ") and WHY[kind] in line, (kind, line)
        assert "\n" not in line and "weights_only" not in line, (kind, line)
    assert not marker.exists()


def test_save_stores_plain_data_only(tmp_path: Path) -> None:
    payload = {"a": np.float64(0.25), "b": [np.int64(3), (1.5, None)], "c": np.arange(3), "t": torch.ones(2)}
    ckpt.save(tmp_path / "x.pt", payload)
    back = torch.load(tmp_path / "x.pt", weights_only=True)
    assert back["a"] == 0.25 and type(back["a"]) is float and back["b"] == [3, (1.5, None)]
    assert torch.equal(back["c"], torch.arange(3)) and torch.equal(back["t"], torch.ones(2))
    with pytest.raises(TypeError, match=r"checkpoint\['f'\]: a function cannot be stored"):
        ckpt.save(tmp_path / "y.pt", {"f": lambda: 0})
    assert not (tmp_path / "y.pt").exists()


def test_rng_states_round_trip_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    import random

    g = torch.Generator().manual_seed(5)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.normal()  # a cached gaussian in numpy's state
    ckpt.save(tmp_path / "r.pt", {"rng": ckpt.rng_state(g)})
    expected = (random.random(), np.random.normal(), torch.rand(1).item(), torch.rand(1, generator=g).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    g2 = torch.Generator()
    ckpt.set_rng_state(torch.load(tmp_path / "r.pt", weights_only=True)["rng"], g2)
    assert (random.random(), np.random.normal(), torch.rand(1).item(), torch.rand(1, generator=g2).item()) == expected


# ------------------------------------------------------------------------------------ a corrupt best.pt
@pytest.fixture
def scripted_curve(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Early stopping sees `curve[epoch - 1]` as the mean validation metric (so the best epoch is chosen
    by the test); the recorded metrics stay the real ones."""
    curve: list[float] = []
    calls = [0]

    def fake_mean(metrics: dict[str, float]) -> float:
        calls[0] += 1
        return curve[calls[0] - 1]

    def per_run(*a: Any, **kw: Any) -> Any:
        calls[0] = 0
        return real_train(*a, **kw)

    real_train = loop_mod.train
    monkeypatch.setattr(loop_mod, "mean_metric", fake_mean)
    monkeypatch.setattr("multitab.training.run.train", per_run)
    yield curve


@pytest.mark.parametrize(("curve", "outcome", "resumed_from"), [
    ([0.5, 0.7, 0.6, 0.65], "retraining from scratch", 0),  # best epoch 2 of 4: its weights must be retrained
    ([0.5, 0.6, 0.7, 0.8], "rebuilt it from last.pt", 4),  # best epoch = last epoch: last.pt holds them
])
def test_truncated_best_pt_then_rerun_gives_the_uninterrupted_metrics(
    tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, scripted_curve: list[float],
    curve: list[float], outcome: str, resumed_from: int,
) -> None:
    scripted_curve[:] = curve
    ck = tmp_path / "ck"
    full, history = _train(tiny, ck)
    assert full["best_epoch"] == 1 + curve.index(max(curve))
    best = ck / ckpt.BEST
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])
    with caplog.at_level(logging.INFO):
        again, history_again = _train(tiny, ck)
    assert f"{best}: unreadable (truncated or corrupt" in caplog.text and outcome in caplog.text
    assert "no best checkpoint" not in caplog.text
    assert again["resumed_from_epoch"] == resumed_from
    assert _strip(again) == _strip(full)  # every metric, bit for bit
    assert [_strip(r) for r in history_again] == [_strip(r) for r in history]
    assert torch.load(best, weights_only=True)["epoch"] == full["best_epoch"]  # best.pt is whole again


def test_a_best_pt_lost_after_training_is_named_not_blamed_on_the_labels(tiny: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real_save = ckpt.save

    def save_then_corrupt(path: Path, payload: dict[str, Any]) -> None:
        real_save(path, payload)
        if path.name == ckpt.BEST:
            path.write_bytes(b"garbage")

    monkeypatch.setattr(ckpt, "save", save_then_corrupt)
    with pytest.raises(RuntimeError, match=r"best checkpoint is unreadable .*run the stage again"):
        _train(tiny, tmp_path / "ck", max_epochs=1)


# ------------------------------------------------------------------------------------- the disk fills up
def _stage_args(tiny: Path, tmp_path: Path, name: str) -> list[str]:
    """Stage arguments of run `real-tiny-tiny-0` in project tmp_path/<name> (see _run_dirs)."""
    params = write_tiny_project(tmp_path / name, data=tiny, train={
        "device": "cpu", "batch_size": 128, "max_epochs": 3, "max_train_rows": None})
    return ["--run", "real-tiny-tiny-0", "--params", str(params)]


def _run_dirs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """(run folder, checkpoint folder) of the project of `_stage_args`."""
    root = tmp_path / name / "results"
    return root / "runs" / "tiny" / "tiny" / "seed0", root / "checkpoints" / "tiny" / "tiny" / "seed0"


def test_disk_full_gives_one_clear_line_and_the_rerun_resumes(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stages import train as stage

    assert stage.main(_stage_args(tiny, tmp_path, "full")) == 0
    capsys.readouterr()
    real_write = mio._write_chunks
    attempted: list[int] = []

    def full_disk(f: Any, data: Any, *a: Any) -> None:  # the second save of last.pt (epoch 2) hits ENOSPC
        if Path(f.name).name.startswith(f".{ckpt.LAST}.") and len(attempted) == 1:
            attempted.append(len(data))
            f.write(bytes(data)[:100])
            raise OSError(errno.ENOSPC, "No space left on device")
        if Path(f.name).name.startswith(f".{ckpt.LAST}."):
            attempted.append(len(data))
        real_write(f, data, *a)

    monkeypatch.setattr(mio, "_write_chunks", full_disk)
    args = _stage_args(tiny, tmp_path, "kill")
    assert stage.main(args) == 1
    err = capsys.readouterr().err
    out, ck = _run_dirs(tmp_path, "kill")
    line = f"error: no space left on {ck / ckpt.LAST} (needed ~{mio._megabytes(attempted[1])} MB"
    assert line in err and "Traceback" not in err, err
    assert not list(ck.glob("*.tmp")) and not list(ck.glob(".*.tmp"))  # no half-written file stays
    assert torch.load(ck / ckpt.LAST, weights_only=True)["epoch"] == 1 and not (out / "metrics.json").exists()
    # space is freed; a save killed by SIGKILL in between left temporaries: the re-run removes them
    monkeypatch.setattr(mio, "_write_chunks", real_write)
    (ck / f".{ckpt.LAST}.k1ll3d.tmp").write_bytes(b"partial")
    out.mkdir(parents=True, exist_ok=True)
    (out / ".metrics.json.k1ll3d.tmp").write_text("{")
    assert stage.main(args) == 0
    assert not list(ck.glob(".*.tmp")) and not list(out.glob(".*.tmp"))
    a = json.loads((_run_dirs(tmp_path, "full")[0] / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert b["resumed_from_epoch"] == 1 and _strip(a) == _strip(b)


# ---------------------------------------------------------------------- settings that change the numbers
class Killed(BaseException):
    """Stands for SIGKILL mid-epoch: nothing after the raise runs (tests/test_training_resume.py kills for
    real; what a re-run sees is the same: last.pt of the last finished epoch)."""


def test_changing_num_threads_between_kill_and_resume_starts_fresh(
    tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck")

    def kill_in_epoch_3(epoch: int, step: int) -> None:
        if (epoch, step) == (2, 3):
            raise Killed

    with pytest.raises(Killed):
        train_run(spec, make_config(), TINY_HPARAMS, on_step=kill_in_epoch_3)
    assert torch.load(tmp_path / "ck" / ckpt.LAST, weights_only=True)["epoch"] == 2
    shutil.copytree(tmp_path / "ck", tmp_path / "ck_same")
    try:
        with caplog.at_level(logging.WARNING):
            two, _ = train_run(spec, make_config(num_threads=2), TINY_HPARAMS)
    finally:
        torch.set_num_threads(1)
    assert "checkpoint of other settings (num_threads: 1 -> 2); starting from scratch" in caplog.text
    assert two["resumed_from_epoch"] == 0 and two["epochs"] == 4
    caplog.clear()
    same_spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=tiny, checkpoint_dir=tmp_path / "ck_same")
    with caplog.at_level(logging.WARNING):  # the control: the same settings resume
        same, _ = train_run(same_spec, make_config(), TINY_HPARAMS)
    assert same["resumed_from_epoch"] == 2 and "other settings" not in caplog.text


def test_fingerprint_holds_every_setting_that_changes_results(tiny: Path, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    ck = tmp_path / "ck"
    _train(tiny, ck, max_epochs=1)
    settings = json.loads(torch.load(ck / ckpt.LAST, weights_only=True)["settings"])
    assert {"num_threads", "deterministic", "device", "dtype", "compile", "precision", "data", "code",
            "torch"} <= set(settings)
    assert set(settings["data"]) == {"meta.json", "train.parquet", "val.parquet", "test.parquet"}
    for change in ({"deterministic": False}, {"compile": True}):  # each one: not resumed, and said why
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            record, _ = _train(tiny, ck, max_epochs=1, **change)
        key, value = next(iter(change.items()))
        assert record["resumed_from_epoch"] == 0 and f"{key}: {not value} -> {value}" in caplog.text
    copy = tmp_path / "tiny_copy"  # the same rows in a re-written file: the data hash decides
    shutil.copytree(tiny, copy)
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "note": "edited"}))
    spec = RunSpec(dataset="tiny", model="tiny", seed=0, data_path=copy, checkpoint_dir=ck)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        record, _ = train_run(spec, make_config(max_epochs=1), TINY_HPARAMS)
    assert record["resumed_from_epoch"] == 0 and "data.meta.json:" in caplog.text


def test_early_stopping_smoothing_is_in_the_fingerprint_and_the_record_only_when_on(
        tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Off (the default), the resolved settings have no smoothing key: a run's fingerprint and metrics.json
    `settings` are those of runs from before the option. On, both name it, so a checkpoint trained without
    smoothing is not resumed with it (nor the reverse): the warning names it and training starts over."""
    ck = tmp_path / "ck"
    off, _ = _train(tiny, ck, max_epochs=1)
    stored = json.loads(torch.load(ck / ckpt.LAST, weights_only=True)["settings"])
    assert "early_stopping_smoothing" not in stored and "early_stopping_smoothing" not in off["settings"]
    assert "smoothing" not in torch.load(ck / ckpt.LAST, weights_only=True)["early_stopping"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        on, history = _train(tiny, ck, max_epochs=2, early_stopping_smoothing=0.5)
    assert on["resumed_from_epoch"] == 0 and "early_stopping_smoothing: <absent> -> 0.5" in caplog.text
    assert on["settings"]["early_stopping_smoothing"] == 0.5 and "val_mean_smoothed" in history[0]
    assert torch.load(ck / ckpt.LAST, weights_only=True)["early_stopping"]["smoothing"] == 0.5
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again, _ = _train(tiny, ck, max_epochs=3, early_stopping_smoothing=0.5)  # same setting: continues
    assert again["resumed_from_epoch"] == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        back, _ = _train(tiny, ck, max_epochs=3)
    assert back["resumed_from_epoch"] == 0 and "early_stopping_smoothing: 0.5 -> <absent>" in caplog.text


def test_model_code_version_follows_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    src = tmp_path / "fp_model_mod.py"
    src.write_text("import torch\nclass M(torch.nn.Linear):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("fp_model_mod")
    before = model_code_version(mod.M(2, 1))
    assert before == model_code_version(mod.M(3, 1))  # the code, not the instance
    src.write_text(src.read_text() + "# edited\n")
    assert model_code_version(mod.M(2, 1)) != before
    assert model_code_version(torch.nn.Linear(2, 1)) != before  # torch classes: the training code only


# ------------------------------------------------------------------------- DVC keeps a run's results
def _dvc(args: list[str], cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "DVC_NO_UPDATER": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(cwd / "src"), str(cwd)])
    r = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    assert (r.returncode == 0) == ok, f"dvc {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def test_dvc_train_stage_keeps_its_results_through_a_failed_rerun(tmp_path: Path) -> None:
    """The real dvc.yaml `train` stage, as written there: a re-run that fails leaves the checkpoints (no DVC
    output, so DVC never deletes them) and the results dvc.lock records in DVC's cache (`dvc checkout` puts
    them back); a stage with no dvc.lock entry whose inputs were trained before is restored from DVC's run
    cache instead of trained."""
    repo = tmp_path / "repo"
    target = real_train_project(repo)
    _dvc(["repro", target], repo)
    run = repo / "results" / "runs" / "higgs" / "stl_mlp" / "seed0"
    metrics = (run / "metrics.json").read_bytes()
    curve = (run / "dvclive" / "plots" / "metrics" / "val_mean.tsv").read_bytes()
    checkpoints = {p: p.read_bytes() for p in (repo / "results" / "checkpoints").rglob("*.pt")}
    assert {p.name for p in checkpoints} == {"best.pt", "last.pt"}
    verdict = repo / "data" / "validated" / "higgs.json"
    passed = verdict.read_bytes()
    verdict.write_text(json.dumps({"success": False}))  # a changed dep: DVC re-runs the stage, which fails
    failed = _dvc(["repro", target], repo, ok=False)
    assert "failed validation" in failed.stderr + failed.stdout
    assert {p: p.read_bytes() for p in (repo / "results" / "checkpoints").rglob("*.pt")} == checkpoints
    _dvc(["checkout", "--force", target], repo)
    assert (run / "metrics.json").read_bytes() == metrics
    assert (run / "dvclive" / "plots" / "metrics" / "val_mean.tsv").read_bytes() == curve
    verdict.write_bytes(passed)  # the first run's inputs, with no dvc.lock entry (as on another machine):
    (repo / "dvc.lock").unlink()  # DVC's run cache restores that run's results instead of training it
    (run / "metrics.json").unlink()
    restored = _dvc(["repro", target], repo)
    assert "skipping run" in restored.stdout + restored.stderr
    assert (run / "metrics.json").read_bytes() == metrics  # a new training would have other timings
