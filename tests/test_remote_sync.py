"""flows/remote.py without Prefect: two clones of one project and a DVC remote in a local folder. A stage
completed and pushed in one clone is restored in the other by `dvc repro --pull` after a pull (its command
does not run there); a running stage's checkpoint folder is copied to the remote and back into a clone that
has none; a stage with a `persist: true` output is not in the run cache (DVC's rule), so it would run again,
which is why the repository's `train` stage has none: trained on one machine, it is restored on another."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from _toy_dvc import dvc_status, real_train_project, run_dvc
from flows import remote
from flows.dag import read_stage_graph

PY = sys.executable
SCRIPT = """\
import json, os, pathlib, sys
name = sys.argv[1]
with open(LOG, "a") as f:
    f.write(json.dumps({"stage": name, "cwd": os.getcwd()}) + "\\n")
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out", name).write_text(name)
"""


def _clones(tmp_path: Path, persist: bool = False) -> tuple[Path, Path, Path]:
    origin, log = tmp_path / "origin", tmp_path / "ran.log"
    origin.mkdir()
    (origin / "s.py").write_text(f"LOG = {str(log)!r}\n" + SCRIPT)
    out: object = {"out/${item}": {"persist": True}} if persist else "out/${item}"
    stage = {"foreach": ["x"], "do": {"cmd": "python s.py ${item}", "deps": ["s.py"], "outs": [out],
                                      "meta": {"checkpoints": "ckpt/${item}"}}}
    (origin / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"s": stage}}))
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=origin, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=origin, check=True)
    subprocess.run([PY, "-m", "dvc", "remote", "add", "-q", "-d", "fleet", str(tmp_path / "remote")], cwd=origin,
                   check=True)
    subprocess.run([*git, "add", "-A"], cwd=origin, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=origin, check=True)
    for name in ("a", "c"):
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / name)], check=True)
    return tmp_path / "a", tmp_path / "c", log


def _repro(root: Path, *extra: str) -> str:
    env = {**os.environ, "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([PY, "-m", "dvc", "repro", "--single-item", *extra, "s@x"], cwd=root, env=env,
                       capture_output=True, text=True, check=True)
    return r.stdout


def test_a_stage_pushed_by_one_clone_is_restored_in_another(tmp_path: Path) -> None:
    a, c, log = _clones(tmp_path)
    _repro(a)
    remote.push(a, "s@x")
    remote.pull(c)
    assert read_stage_graph(c, changed=True).changed == {"s@x"}  # no dvc.lock entry here yet
    assert "is cached - skipping run" in _repro(c, "--pull")
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert [Path(e["cwd"]) for e in ran] == [a]  # the command ran once, in the first clone
    assert (c / "out" / "x").read_text() == "x"
    assert dvc_status(c) == {}


def test_a_persisted_output_keeps_a_stage_out_of_the_run_cache(tmp_path: Path) -> None:
    a, c, log = _clones(tmp_path, persist=True)
    _repro(a)
    remote.push(a, "s@x")
    remote.pull(c)
    assert "is cached" not in _repro(c, "--pull")  # DVC's run cache skips stages with persist outputs
    assert len(log.read_text().splitlines()) == 2


def test_the_real_train_stage_trained_on_one_machine_is_restored_on_another(tmp_path: Path) -> None:
    """The repository's own `train` stage (dvc.yaml as written): trained and pushed in one checkout, restored
    in a second checkout of the same commit and data from the remote's run cache, with no training there."""
    a, c = tmp_path / "a", tmp_path / "c"
    target = real_train_project(a)
    run_dvc(["remote", "add", "-q", "-d", "fleet", str(tmp_path / "remote")], a)
    shutil.copytree(a, c, symlinks=True)  # the second machine: same commit, same data, nothing trained
    run_dvc(["repro", "--single-item", target], a)
    remote.push(a, target)
    remote.pull(c)
    assert "is cached - skipping run" in run_dvc(["repro", "--single-item", "--pull", target], c)
    metrics = Path("results/runs/higgs/stl_mlp/seed0/metrics.json")
    assert (c / metrics).read_bytes() == (a / metrics).read_bytes()
    assert not (c / "results" / "checkpoints").exists()  # nothing trained in c
    assert dvc_status(c) == {}


def test_checkpoints_travel_while_the_stage_runs(tmp_path: Path) -> None:
    a, c, _ = _clones(tmp_path)
    ckpt = a / "ckpt" / "x"
    ckpt.mkdir(parents=True)
    copy = tmp_path / "remote" / remote.PARTIAL / "s@x" / "last.pt"
    with remote.mirrored_checkpoints(a, "s@x", "ckpt/x", every=0.05):
        (ckpt / "last.pt").write_bytes(b"epoch 1")
        deadline = time.monotonic() + 30
        while not copy.exists() and time.monotonic() < deadline:  # copied while the body still runs
            time.sleep(0.05)
        assert copy.read_bytes() == b"epoch 1"
        (ckpt / "last.pt").write_bytes(b"epoch 2")
    assert copy.read_bytes() == b"epoch 2"  # the last copy when the stage ends
    assert remote.restore_checkpoints(c, "s@x", "ckpt/x") == 1
    assert (c / "ckpt" / "x" / "last.pt").read_bytes() == b"epoch 2"
    (c / "ckpt" / "x" / "last.pt").write_bytes(b"epoch 3")
    assert remote.restore_checkpoints(c, "s@x", "ckpt/x") == 0  # a clone's own checkpoints win
    assert (c / "ckpt" / "x" / "last.pt").read_bytes() == b"epoch 3"
    remote.drop_checkpoints(a, "s@x")
    assert not copy.parent.exists()
    assert read_stage_graph(a).checkpoints == {"s@x": "ckpt/x"}
