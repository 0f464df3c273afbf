"""A corrupted DVC cache object or workspace file is never used (multitab.integrity, flows/integrity.py).

DVC trusts its cache objects' names: a byte flipped in a workspace output and in its cache object (the
object's stat unchanged, as when a bit goes bad on disk), then `dvc repro --single-item <producer>`, restores
the corrupted file from the run cache and `dvc status` calls everything up to date. The tests build that in a
toy DVC project whose stages go through stages/_common.py (prepare -> train@toy -> aggregate, shaped like
preprocess -> train -> aggregate) and check that the flow's pre-flight and the stage that reads the file
both stop with exit status 3, one line naming the file and what to do, and that doing it works.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from _toy_dvc import PY, dvc_status, make_project
from multitab import integrity
from multitab.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]
DATA = "data/processed/toy/train.bin"
METRICS = "results/runs/toy/seed0/metrics.json"

_STAGE = """\
import json, pathlib, sys
from stages._common import run

def body():
{body}

sys.exit(run({name!r}, body))
"""

PREPARE = """\
import json, pathlib
d = pathlib.Path('data/processed/toy'); d.mkdir(parents=True, exist_ok=True)
(d / 'train.bin').write_bytes(bytes(range(256)) * 400)
(d / 'meta.json').write_text(json.dumps({'rows': 400}))
"""
TRAIN = """\
data = pathlib.Path('data/processed/toy/train.bin').read_bytes()
out = pathlib.Path('results/runs/toy/seed0'); out.mkdir(parents=True, exist_ok=True)
(out / 'metrics.json').write_text(json.dumps({'test': {'auc': round(sum(data) % 1000 / 1000, 3)}}))
"""
AGGREGATE = """\
runs = sorted(pathlib.Path('results/runs').rglob('metrics.json'))
auc = [json.loads(p.read_text())['test']['auc'] for p in runs]
pathlib.Path('results/summary').mkdir(parents=True, exist_ok=True)
pathlib.Path('results/summary/summary.json').write_text(json.dumps({'mean_auc': sum(auc) / len(auc)}))
"""


def _stage_script(name: str, body: str) -> str:
    return _STAGE.format(name=name, body=textwrap.indent(body, "    "))


def toy_project(tmp_path: Path) -> Path:
    stages = {
        "prepare": {"cmd": "python scripts/prepare.py", "deps": ["scripts/prepare.py"],
                    "outs": ["data/processed/toy"], "_script": PREPARE},
        "train": {"foreach": ["toy"], "do": {
            "cmd": "python scripts/train.py", "deps": ["scripts/train.py", "data/processed/${item}"],
            "metrics": [{"results/runs/${item}/seed0/metrics.json": {"cache": True}}]}},
        "aggregate": {"cmd": "python scripts/aggregate.py", "deps": ["scripts/aggregate.py", "results/runs"],
                      "outs": [{"results/summary": {"cache": False}}],  # no copy in DVC's cache
                      "_script": _stage_script("aggregate", AGGREGATE)},
    }
    root = make_project(tmp_path / "p", stages)
    (root / "scripts" / "train.py").write_text(_stage_script("train@toy", TRAIN))
    return root


def dvc(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dvc ARGS` in the toy project; its stages import this checkout's stages/ and src/."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
    env.pop("DVC_STAGE", None)
    return subprocess.run([PY, "-m", "dvc", *args], cwd=root, env=env, capture_output=True, text=True)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def cache_object(root: Path, rel: str) -> Path:
    digest = md5(root / rel)
    return root / ".dvc" / "cache" / "files" / "md5" / digest[:2] / digest[2:]


def flip_byte(path: Path, keep_mtime: bool = False, at: int = 10) -> None:
    """One byte changed in place (same size and inode); with `keep_mtime`, the file's mtime put back, as
    with a bit gone bad on disk or a copy that keeps times: DVC's state database then vouches for it."""
    before = path.stat()
    path.chmod(0o644)  # DVC makes its cache objects read-only
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    path.chmod(before.st_mode)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def corrupt_and_restore(root: Path, rel: str, producer: str) -> Path:
    """A byte flipped in the workspace file and in its cache object (unseen by DVC: an object whose stat
    changed DVC hashes again, and deletes when corrupted), then `dvc repro --single-item <producer>`, which
    sees the workspace file changed and restores the corrupted object from its run cache; returns the object."""
    obj = cache_object(root, rel)
    flip_byte(root / rel)
    flip_byte(obj, keep_mtime=True)
    out = ok(dvc(root, "repro", "--single-item", producer))
    assert "is cached - skipping run, checking out outputs" in out, out  # from the run cache
    assert md5(root / rel) == md5(obj) != obj.name  # the corrupted copy is in the workspace
    assert producer not in dvc_status(root)  # and DVC calls it up to date
    return obj


def flow(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`python -m flows.pipeline --root ROOT ARGS` in this process: its exit status and last stderr line."""
    from flows.pipeline import main

    capsys.readouterr()
    code = main(["--root", str(root), *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def stage_error(proc: subprocess.CompletedProcess[str], stage: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"[{stage}] error: ")]
    assert lines, proc.stderr
    return lines[-1].removeprefix(f"[{stage}] error: ")


def test_a_corrupted_data_file_restored_from_the_cache_stops_the_flow_and_its_reader(tmp_path, capsys):
    root = toy_project(tmp_path)
    ok(dvc(root, "repro"))
    good = (root / METRICS).read_text()
    obj = corrupt_and_restore(root, DATA, "prepare")
    shown = obj.relative_to(root)
    assert dvc_status(root) == {}  # every stage, the ones reading the file included

    code, line = flow(root, capsys)
    assert code == BAD_INPUT, line
    assert line.startswith(f"flows.pipeline: {DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"cache object {shown}" in line and f"rm -f {shown}" in line
    assert "dvc repro --force --single-item prepare" in line

    proc = dvc(root, "repro", "--force", "--single-item", "train@toy")
    assert proc.returncode != 0 and "exited with 3" in proc.stderr.replace("\n", " "), proc.stderr
    assert stage_error(proc, "train@toy").startswith(f"{DATA}: differs from what prepare recorded in dvc.lock")
    assert not (root / METRICS).exists()  # nothing computed from it (DVC keeps the recorded one in its cache)

    # what the line says to do mends it
    obj.unlink()
    ok(dvc(root, "repro", "--force", "--single-item", "prepare"))
    ok(dvc(root, "repro", "--force", "--single-item", "train@toy"))
    assert flow(root, capsys)[0] == 0 and (root / METRICS).read_text() == good


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_a_stage_restored_corrupted_during_the_flow_fails_before_any_stage_reads_it(tmp_path, capsys,
                                                                                      prefect_server):
    """Without the manual `dvc repro`: DVC sees the workspace file changed, so the pre-flight leaves it to DVC,
    which restores the corrupted object during the flow; the stage fails there, not a stage after it."""
    root = toy_project(tmp_path)
    ok(dvc(root, "repro"))
    obj = cache_object(root, DATA)
    flip_byte(root / DATA)
    flip_byte(obj, keep_mtime=True)
    code, line = flow(root, capsys, "--retries", "0")
    assert code == BAD_INPUT, line
    assert line.startswith("flows.pipeline: 1 stage(s) failed; prepare: stage prepare exited with code 3 (bad "
                           f"input, not retried): {DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"rm -f {obj.relative_to(root)}" in line
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    assert summary["stages"]["train@toy"]["status"] == "not_run"

    # DVC now calls the file up to date; a deployment's run (the flow without the CLI around it) checks too
    from flows.pipeline import pipeline

    state = pipeline(root=str(root), return_state=True)
    assert state.is_failed() and (state.message or "").startswith(f"{DATA}: differs from what prepare"), state


def test_a_corrupted_metrics_file_stops_the_flow_and_an_aggregate_that_never_ran(tmp_path, capsys):
    """A trained run's metrics.json (a DVC metric with cache: true) read by an aggregate stage that has not
    run yet (no dvc.lock entry: its inputs come from dvc.yaml)."""
    root = toy_project(tmp_path)
    ok(dvc(root, "repro", "train@toy"))
    obj = corrupt_and_restore(root, METRICS, "train@toy")

    code, line = flow(root, capsys, "--targets", "train")
    assert code == BAD_INPUT, line
    assert line.startswith(f"flows.pipeline: {METRICS}: differs from what train@toy recorded in dvc.lock"), line
    assert f"rm -f {obj.relative_to(root)}" in line and "dvc repro --force --single-item train@toy" in line

    proc = dvc(root, "repro", "--single-item", "aggregate")
    assert proc.returncode != 0, proc.stdout
    assert stage_error(proc, "aggregate").startswith(f"{METRICS}: differs from what train@toy recorded")
    assert not (root / "results" / "summary").exists()


def test_an_edited_workspace_file_with_an_intact_cache_object_says_checkout_relink(tmp_path, capsys):
    root = toy_project(tmp_path)
    ok(dvc(root, "repro"))
    flip_byte(root / DATA)
    proc = dvc(root, "repro", "--force", "--single-item", "train@toy")
    line = stage_error(proc, "train@toy")
    assert line.startswith(f"{DATA}: differs from what prepare recorded in dvc.lock"), line
    assert f"restore it with `dvc checkout --relink --force {DATA}`" in line
    assert proc.returncode != 0

    # what the line says to do mends it; the same edit with its mtime put back (DVC sees nothing, as with a
    # bit gone bad on disk): the pre-flight says the same
    ok(dvc(root, "checkout", "--relink", "--force", DATA))
    ok(dvc(root, "repro", "--force", "--single-item", "train@toy"))
    assert dvc_status(root) == {}
    flip_byte(root / DATA, keep_mtime=True)
    assert dvc_status(root) == {}
    code, line = flow(root, capsys)
    assert code == BAD_INPUT and f"dvc checkout --relink --force {DATA}" in line, line


def test_the_warm_check_hashes_only_changed_files(tmp_path, monkeypatch):
    root = toy_project(tmp_path)
    ok(dvc(root, "repro"))
    hashed: list[Path] = []
    real = integrity.md5_file
    monkeypatch.setattr(integrity, "md5_file", lambda p: hashed.append(Path(p)) or real(p))

    assert (root / integrity.STATE_FILE).is_file()  # the stages that read outputs checked them
    (root / integrity.STATE_FILE).unlink()
    cold = integrity.verify_outputs(root)
    assert cold.files == cold.hashed == 4  # train.bin, meta.json, metrics.json, summary/summary.json
    assert (root / integrity.STATE_FILE).is_file()
    hashed.clear()
    warm = integrity.verify_outputs(root)
    assert (warm.files, warm.hashed, hashed) == (4, 0, [])

    # a same-size edit with a new mtime is hashed again and caught
    flip_byte(root / DATA)
    with pytest.raises(integrity.IntegrityError) as caught:
        integrity.verify_outputs(root)
    assert caught.value.path == DATA and [p.name for p in hashed][0] == "train.bin"

    # a folder output without a copy in DVC's cache (`cache: false`) is compared as a whole
    (root / "results" / "summary" / "summary.json").write_text('{"mean_auc": 0.99}')
    with pytest.raises(integrity.IntegrityError, match=r"^results/summary: differs from what aggregate recorded in "
                       r"dvc\.lock .*holds no list of its files: re-run the stage: `dvc repro --force "
                       r"--single-item aggregate`$"):
        integrity.verify_outputs(root, ["aggregate"])


def test_declared_deps_resolve_every_stage_of_the_repository_as_dvc_does():
    """dvc.yaml's foreach / matrix items and ${...} references (params.yaml, runs.yaml) resolved without DVC
    give each stage the dependencies DVC gives it (a stage's check of its inputs before it ever ran)."""
    from dvc.repo import Repo

    from multitab.stage_deps import declared_deps, normalise

    with Repo(str(ROOT)) as repo:
        stages = list(repo.index.stages)
        assert len(stages) > 20
        for stage in stages:
            expected = sorted({normalise(os.path.relpath(d.fs_path, ROOT)) for d in stage.deps
                               if not d.def_path.endswith("params.yaml")})
            assert sorted(set(declared_deps(ROOT, stage.addressing))) == expected, stage.addressing


def test_outside_dvc_or_without_dvc_lock_nothing_is_checked(tmp_path):
    assert integrity.verify_stage_inputs({}) == integrity.Tally()
    env = {"DVC_STAGE": "train@toy", "DVC_ROOT": str(tmp_path)}
    assert integrity.verify_stage_inputs(env) == integrity.Tally()
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {}}))
    assert integrity.verify_stage_inputs(env) == integrity.Tally()
