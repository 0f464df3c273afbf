"""multitab.files.lock_writes: a stage's DVC (`python -m multitab.files.lock_writes repro --single-item S`) leaves its
dvc.lock entry pending, and one merge writes dvc.lock exactly as DVC writes it stage by stage; what a killed
run left is merged when its outputs are still the ones recorded, dropped otherwise. No Prefect here (the
flow's use of it: tests/test_pipeline.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _toy_dvc import PY, dvc_status, make_project, write_stage
from multitab.files import lock_writes


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def dvc(root: Path, *args: str, module: str = "dvc") -> str:
    r = subprocess.run([PY, "-m", module, *args], cwd=root, env=_env(), capture_output=True, text=True)
    assert r.returncode == 0, f"{module} {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def project(root: Path) -> Path:
    """Four stages: a params dependency (a file DVC parses again for each hash), a folder output, a metric,
    and a stage two others depend on."""
    stages = {
        "a": write_stage("a"),
        "b": write_stage("b", ["out/a"]),
        "c": write_stage("c", ["out/a"]),
        "d": {
            "cmd": "python scripts/d.py",
            "deps": ["scripts/d.py", "out/b"],
            "params": [{"knobs.yaml": ["lr", "layers"]}],
            "outs": ["out/d"],
            "metrics": [{"out/m.json": {"cache": True}}],
            "_script": (
                "import json, pathlib, yaml\n"
                "k = yaml.safe_load(open('knobs.yaml'))\n"
                "pathlib.Path('out/d').mkdir(parents=True, exist_ok=True)\n"
                "pathlib.Path('out/d/x.txt').write_text(str(k['lr']) + open('out/b').read())\n"
                "pathlib.Path('out/m.json').write_text(json.dumps({'score': k['lr'] * 2}))\n"
            ),
        },
    }
    make_project(root, stages)
    (root / "knobs.yaml").write_text(yaml.safe_dump({"lr": 0.001, "layers": [64, 32], "unused": {"x": 1}}))
    return root


def change_everything(root: Path) -> None:
    """Change what every stage reads (a's output, d's params)."""
    script = root / "scripts" / "a.py"
    text = script.read_text()
    assert "'a\\n'" in text
    script.write_text(text.replace("'a\\n'", "'A\\n'"))
    (root / "knobs.yaml").write_text(yaml.safe_dump({"lr": 0.01, "layers": [64, 32], "unused": {"x": 1}}))


ORDER = ["a", "b", "c", "d"]


def test_one_merge_writes_dvc_lock_as_dvc_does_stage_by_stage(tmp_path):
    """A project reproduced once (dvc.lock has every stage, as in a fresh clone), then everything changed:
    plain `dvc repro --single-item` stage by stage and the deferred entries merged (twice: before the stages
    that read a, and at the end) give the same dvc.lock, byte for byte, and the same outputs."""
    base = project(tmp_path / "base")
    dvc(base, "repro")
    change_everything(base)
    plain, batched = tmp_path / "plain", tmp_path / "batched"
    shutil.copytree(base, plain, symlinks=True)
    shutil.copytree(base, batched, symlinks=True)
    for stage in ORDER:
        dvc(plain, "repro", "--single-item", stage)

    before = (batched / "dvc.lock").read_bytes()
    out = dvc(batched, "repro", "--single-item", "a", module="multitab.files.lock_writes")
    assert "Running stage 'a'" in out
    assert (batched / "dvc.lock").read_bytes() == before, "the stage rewrote dvc.lock itself"
    assert list(lock_writes.pending(batched)) == ["a"]
    assert lock_writes.pending_entry(batched, "a")["outs"][0]["path"] == "out/a"
    assert lock_writes.merge(batched) == ["a"]
    assert lock_writes.pending(batched) == {}
    for stage in ORDER[1:]:
        dvc(batched, "repro", "--single-item", stage, module="multitab.files.lock_writes")
    assert list(lock_writes.pending(batched)) == ["b", "c", "d"]  # in the order they completed
    assert lock_writes.merge(batched) == ["b", "c", "d"]

    assert (batched / "dvc.lock").read_bytes() == (plain / "dvc.lock").read_bytes()
    for rel in ("out/a", "out/b", "out/c", "out/d/x.txt", "out/m.json"):
        assert (batched / rel).read_bytes() == (plain / rel).read_bytes(), rel
    assert dvc_status(batched) == {}


def test_a_new_project_gets_the_same_entries(tmp_path):
    """Without a dvc.lock yet, the merge creates it with DVC's header and the entries DVC writes."""
    base = project(tmp_path / "base")
    plain = tmp_path / "plain"
    shutil.copytree(base, plain, symlinks=True)
    for stage in ORDER:
        dvc(plain, "repro", "--single-item", stage)
        dvc(base, "repro", "--single-item", stage, module="multitab.files.lock_writes")
        lock_writes.merge(base)
    assert (base / "dvc.lock").read_text().startswith("schema: '2.0'\nstages:\n")
    assert (base / "dvc.lock").read_bytes() == (plain / "dvc.lock").read_bytes()


def test_a_killed_runs_entries_are_merged_unless_their_outputs_changed(tmp_path):
    """Entries left pending (the flow was killed before merging) go into dvc.lock when the outputs are still
    the recorded ones; an entry whose output was rewritten since is dropped, and DVC finds that stage
    changed again."""
    root = project(tmp_path / "p")
    dvc(root, "repro")
    change_everything(root)
    for stage in ("a", "b", "c"):
        dvc(root, "repro", "--single-item", stage, module="multitab.files.lock_writes")
    (root / "out" / "c").write_text("edited by hand\n")
    merged, dropped = lock_writes.recover(root)
    assert merged == ["a", "b"] and dropped == ["c"]
    assert lock_writes.pending(root) == {}
    assert set(dvc_status(root)) == {"c", "d"}  # c: its output differs from dvc.lock; d: never ran


def test_the_mode_is_checked():
    assert lock_writes.batched({}) and not lock_writes.batched({lock_writes.MODE_ENV: "each"})
    with pytest.raises(ValueError, match="MULTITAB_LOCK_WRITES='sometimes'"):
        lock_writes.batched({lock_writes.MODE_ENV: "sometimes"})


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def checked_stage(name: str, deps: list[str]) -> dict:
    """A toy stage that, like every stage script (stages/_common.py `run`), first checks the outputs it reads
    against what their producers recorded in dvc.lock."""
    return write_stage(name, deps, extra="""
        from stages._common import run
        code = run("x", lambda: None)
        if code:
            raise SystemExit(code)""")


def test_the_flow_merges_dvc_lock_before_the_stages_that_read_and_at_the_end(tmp_path, monkeypatch, prefect_server):
    """Through the flow: a's new entry is merged before b1..b4 start (each checks out/a against dvc.lock and
    would fail on a's old entry), theirs in one merge at the end: two rewrites of dvc.lock for five stages,
    which comes out byte for byte as a plain `dvc repro` writes it, and DVC finds everything up to date."""
    from flows.pipeline import pipeline

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))  # the checked stages' `run`
    bs = [f"b{i}" for i in range(1, 5)]
    root = make_project(tmp_path / "flow", {"a": write_stage("a"), **{b: checked_stage(b, ["out/a"]) for b in bs}})
    pipeline(root=str(root))
    plain = tmp_path / "plain"
    shutil.copytree(root, plain, symlinks=True)
    for project_root in (root, plain):
        change_everything(project_root)
    dvc(plain, "repro")
    pipeline(root=str(root))
    summary = yaml.safe_load((root / "results" / "pipeline_summary.json").read_text())
    assert sorted(summary["ran"]) == ["a", *bs]
    assert summary["lock_writes"] == {"batched": True, "merges": 2, "entries": 5, "seconds": pytest.approx(
        summary["lock_writes"]["seconds"])}
    assert (root / "dvc.lock").read_bytes() == (plain / "dvc.lock").read_bytes()
    assert lock_writes.pending(root) == {} and dvc_status(root) == {}


def test_ctrl_c_merges_what_completed_before_the_run_ends(tmp_path, prefect_server):
    """A run stopped by Ctrl-C (SIGINT) while a stage runs writes the entries of the stages that completed
    into dvc.lock before it exits: `dvc status` afterwards lists only what did not complete."""
    import signal
    import time

    from prefect.settings import PREFECT_API_URL

    slow = write_stage("slow", extra="""
        import os, time
        pathlib.Path(os.environ["TOY_STARTED"]).touch()
        time.sleep(300)""")
    root = make_project(tmp_path / "p", {"fast": write_stage("fast"), "slow": slow})
    started = tmp_path / "started"
    env = {**_env(), "PYTHONPATH": os.pathsep.join(sys.path), "PREFECT_API_URL": PREFECT_API_URL.value(),
           "TOY_STARTED": str(started)}
    proc = subprocess.Popen([PY, "-m", "flows.pipeline", "--root", str(root)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not (started.exists() and "fast" in lock_writes.pending(root)) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    assert "fast" not in yaml.safe_load((root / "dvc.lock").read_text() if (root / "dvc.lock").exists() else "{}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "fast" in yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    assert lock_writes.pending(root) == {} and set(dvc_status(root)) == {"slow"}
