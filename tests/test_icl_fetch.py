"""`python -m multitab.icl.fetch` (make icl-weights) against a fake model hub on 127.0.0.1: one command fetches
every checkpoint params.yaml names at its revision, verifies it and writes icl.lock, which `dvc repro icl` then
runs with; a wrong file is refused naming it; no hub is one line and exit status 3; a file copied in by hand
with `--from` is verified and locked. Random-weight checkpoints: plumbing only, never a model's result."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from _fake_hub import COMMIT, FakeHub
from _icl_tiny import ROOT, icl_section, orion_file, tabicl_file
from _training_tiny import write_tiny_processed
from multitab.icl import fetch, lock

PINNED = "ab" * 20  # the revision params.yaml pins for TabICL's files


@pytest.fixture
def hub_files(tmp_path):
    """The three checkpoints as the fake hub serves them, and their sha256."""
    made = tmp_path / "made"
    made.mkdir()
    bodies = {name: path.read_bytes() for name, (path, _) in {
        "orion_msp": orion_file(made), "tabicl": tabicl_file(made, False), "tabicl_regressor": tabicl_file(made, True)
    }.items()}
    return bodies, {name: hashlib.sha256(b).hexdigest() for name, b in bodies.items()}


def _params(folder: Path, shas: dict[str, str], datasets=("acs_income",)) -> Path:
    """The repository's params.yaml with a test `icl`: Orion-MSP unpinned (the first fetch pins it), TabICL's
    two files pinned by revision and sha256, as params.yaml pins them."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["icl"] = icl_section({n: None for n in shas}, datasets=list(datasets))
    for name in ("tabicl", "tabicl_regressor"):
        raw["icl"]["checkpoints"][name].update(revision=PINNED, sha256=shas[name])
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _serve(bodies: dict[str, bytes]) -> FakeHub:
    return FakeHub({(f"Lab/{name}", f"{name}.ckpt"): body for name, body in bodies.items()})


def _fetch(folder: Path, *args: str) -> int:
    return fetch.main([*args, "--params", str(folder / "params.yaml"), "--lock", str(folder / "icl.lock"),
                       "--cache", str(folder / ".cache" / "icl")])


@pytest.fixture(autouse=True)
def _hub_env(monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")


def test_one_command_fetches_every_checkpoint_and_writes_the_lock(tmp_path, hub_files, monkeypatch, capsys):
    bodies, shas = hub_files
    _params(tmp_path, shas)
    with _serve(bodies) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert _fetch(tmp_path) == 0
        entries = lock.read(tmp_path / "icl.lock")
        assert sorted(entries) == ["orion_msp", "tabicl", "tabicl_regressor"]
        for name, entry in entries.items():
            assert entry.sha256 == shas[name] and (tmp_path / entry.path).read_bytes() == bodies[name]
            assert not Path(entry.path).is_absolute() and entry.source == "hub"
        assert entries["orion_msp"].revision == COMMIT  # the default branch's commit, recorded
        assert entries["tabicl"].revision == PINNED  # fetched at the pinned revision
        assert [entries[n].checked_against for n in ("orion_msp", "tabicl")] == ["first fetch", "params"]
        out = capsys.readouterr().out
        assert "orion_msp:" in out and "not pinned before: pinned in the lock now" in out
        # a second fetch (another clone of the committed lock) is checked against the first one's hash
        assert _fetch(tmp_path, "orion_msp") == 0
        assert lock.read(tmp_path / "icl.lock")["orion_msp"].checked_against == "lock"


def test_a_wrong_file_is_refused_naming_it(tmp_path, hub_files, monkeypatch, capsys):
    bodies, shas = hub_files
    _params(tmp_path, shas)
    wrong = bodies["tabicl_regressor"]  # the regressor's bytes served as the classifier
    with _serve({**bodies, "tabicl": wrong}) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert _fetch(tmp_path, "tabicl") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("error: tabicl: ") and "Lab/tabicl/tabicl.ckpt" in err
    assert f"expected sha256 {shas['tabicl']}, found {shas['tabicl_regressor']}" in err and "--from" in err
    assert "tabicl" not in lock.read(tmp_path / "icl.lock")
    assert not [p for p in (tmp_path / ".cache").rglob("*") if p.is_file() and p.read_bytes() == wrong]

    # the first fetch's hash pins later ones: a changed file behind the same name is refused too
    with _serve(bodies) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert _fetch(tmp_path, "orion_msp") == 0
    with _serve({**bodies, "orion_msp": wrong}) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        shutil.rmtree(tmp_path / ".cache")
        assert _fetch(tmp_path, "orion_msp") == 3
    assert f"expected sha256 {shas['orion_msp']}" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["refused", "offline"])
def test_no_hub_is_one_line_and_exit_3(tmp_path, hub_files, monkeypatch, capsys, how):
    """A closed port (nothing listens) or HF_HUB_OFFLINE: one line that says how to copy the file in, at once
    (huggingface_hub's own download retries for ~20 s and ends in a traceback)."""
    _, shas = hub_files
    _params(tmp_path, shas)
    if how == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with _serve({}) as url:
        closed = url  # the port is free again once the server is shut down
    monkeypatch.setenv("HF_ENDPOINT", closed)
    start = time.monotonic()
    assert _fetch(tmp_path) == 3
    assert time.monotonic() - start < 15
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "cannot be reached" in err and "python -m multitab.icl.fetch orion_msp --from" in err
    assert "Traceback" not in err and not (tmp_path / "icl.lock").exists()


def test_a_file_copied_in_by_hand_is_verified_and_locked(tmp_path, hub_files, capsys):
    bodies, shas = hub_files
    _params(tmp_path, shas)
    good, bad = tmp_path / "downloaded.ckpt", tmp_path / "other.ckpt"
    good.write_bytes(bodies["tabicl"])
    bad.write_bytes(bodies["orion_msp"])
    assert _fetch(tmp_path, "tabicl", "--from", str(bad)) == 3
    assert f"checkpoint {bad} is not the pinned file" in capsys.readouterr().err
    assert _fetch(tmp_path, "tabicl", "--from", str(good)) == 0
    entry = lock.read(tmp_path / "icl.lock")["tabicl"]
    assert entry.source == str(good) and entry.sha256 == shas["tabicl"] and entry.revision is None
    assert (tmp_path / entry.path).read_bytes() == bodies["tabicl"]


def _stage_project(project: Path, shas: dict[str, str]) -> dict:
    """A project folder with tiny processed data and the test params; the icl stage as dvc.yaml declares it."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["icl"]
    assert "icl.lock" in stage["deps"] and "--lock icl.lock" in stage["cmd"]
    write_tiny_processed(project / "data" / "processed" / "acs_income", n={"train": 40, "val": 10, "test": 10})
    (project / "data" / "synthetic").mkdir(parents=True)
    (project / "data" / "synthetic" / ".keep").write_text("")
    _params(project, shas)
    return stage


def _records_name_the_locked_files(project: Path, shas: dict[str, str]) -> None:
    locked = lock.read(project / "icl.lock")
    orion = json.loads((project / "results/icl/acs_income/orion_msp/seed0/metrics.json").read_text())
    assert orion["status"] == {"click": "ok", "marital": "ok", "m_jj": "not applicable"}
    assert orion["checkpoints"]["orion_msp"]["sha256"] == locked["orion_msp"].sha256 == shas["orion_msp"]
    assert orion["profile"] == "cpu" and orion["device"] == "cpu"
    tabicl = json.loads((project / "results/icl/acs_income/tabicl/seed0/metrics.json").read_text())
    assert set(tabicl["checkpoints"]) == {"tabicl", "tabicl_regressor"} and set(tabicl["status"].values()) == {"ok"}


def test_the_icl_stage_runs_with_the_fetched_lock(tmp_path, hub_files, monkeypatch):
    """`make icl-weights`' command, then the icl stage's command line of dvc.yaml run in-process in the project."""
    import shlex

    from stages import icl as icl_stage

    bodies, shas = hub_files
    stage = _stage_project(tmp_path, shas)
    with _serve(bodies) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert _fetch(tmp_path) == 0
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(stage["cmd"])
    assert argv[:3] == ["python", "-m", "stages.icl"]
    assert icl_stage.main(argv[3:]) == 0
    _records_name_the_locked_files(tmp_path, shas)


@pytest.mark.slow
def test_dvc_repro_icl_runs_with_the_fetched_lock(tmp_path, hub_files, monkeypatch):
    """The same through DVC: the dvc.yaml stage as the repository declares it (its command, params and the
    deps a project holds) in a toy DVC project, `dvc repro icl` after the fetch (~40 s: DVC and the stage's
    own process)."""
    from _toy_dvc import make_project, run_dvc

    bodies, shas = hub_files
    project = make_project(tmp_path / "project", {})
    shutil.copytree(ROOT / "stages", project / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    stage = _stage_project(project, shas)
    deps = [d for d in stage["deps"] if not d.startswith(("src/", "stages/"))]
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"icl": {**stage, "deps": deps}}}, sort_keys=False))
    with _serve(bodies) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert _fetch(project) == 0
    assert "Running stage 'icl'" in run_dvc(["repro", "icl"], project)
    _records_name_the_locked_files(project, shas)
