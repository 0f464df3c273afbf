"""A toy DVC project whose stages go through stages/_common.py (prepare -> train@toy -> aggregate, shaped like
preprocess -> train -> aggregate), and a byte flipped in a workspace output and in its DVC cache object with
the object's stat unchanged (as when a bit goes bad on disk), which DVC then restores as it is."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from _toy_dvc import PY, make_project

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


def dvc_status(root: Path) -> dict[str, Any]:
    """`dvc status` of the project, in this process (as the flow asks DVC): {} when DVC finds it up to date."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return dict(repo.status())


def copy_project(source: Path, dest: Path) -> Path:
    """A copy of a toy project (its DVC cache and dvc.lock included) that DVC sees as its own: new inodes, so
    DVC and the verified state hash its files again, and they match what dvc.lock records."""
    shutil.copytree(source, dest, symlinks=True)
    return dest


def stage_error(proc: subprocess.CompletedProcess[str], stage: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"[{stage}] error: ")]
    assert lines, proc.stderr
    return lines[-1].removeprefix(f"[{stage}] error: ")


def flow(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`python -m flows.pipeline --root ROOT ARGS` in this process: its exit status and last stderr line."""
    from flows.pipeline import main

    capsys.readouterr()
    code = main(["--root", str(root), *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""
