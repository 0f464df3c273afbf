"""flows.progress: finished runs kept in the repository come back through DVC's run cache on a machine
whose cache is gone; DVC still decides (a changed input runs again), and a corrupted object is refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests._toy_dvc import run_dvc

from flows.progress import ProgressError, load, main, save
from multitab.runtime.exit_codes import BAD_INPUT

TRAIN = """\
import pathlib, sys
run = sys.argv[sys.argv.index('--run') + 1]
with open(pathlib.Path('trained.log'), 'a') as log:  # not an output: counts the runs that really trained
    log.write(run + '\\n')
out = pathlib.Path('out') / run
(out / 'dvclive').mkdir(parents=True, exist_ok=True)
text = pathlib.Path('data.txt').read_text()
(out / 'metrics.json').write_text('{"run": "%s", "data": %d}' % (run, len(text)))
(out / 'dvclive' / 'ev.tsv').write_text('step\\tev\\n0\\t0.5\\n')
"""


def _project(root: Path) -> Path:
    root.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True, env=env)
    (root / "stages").mkdir()
    (root / "stages" / "__init__.py").write_text("")
    (root / "stages" / "train.py").write_text(TRAIN)
    (root / "data.txt").write_text("rows\n")
    (root / ".gitignore").write_text("/out/\n/trained.log\n")
    stage = {"foreach": ["attribution-a", "study-b"],
             "do": {"cmd": "python -m stages.train --run ${item}", "deps": ["stages/train.py", "data.txt"],
                    "outs": ["out/${item}/metrics.json", "out/${item}/dvclive"]}}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}, sort_keys=False))
    return root


def _new_machine(root: Path) -> None:
    """What a fresh clone has: no DVC cache, no outputs, no dvc.lock entries."""
    for path in (root / ".dvc" / "cache", root / ".dvc" / "tmp", root / "out"):
        shutil.rmtree(path, ignore_errors=True)
    (root / "dvc.lock").unlink(missing_ok=True)
    (root / "trained.log").unlink(missing_ok=True)


def _trained(root: Path) -> list[str]:
    log = root / "trained.log"
    return sorted(log.read_text().split()) if log.exists() else []


def test_saved_runs_are_restored_by_dvc_and_a_changed_input_runs_again(tmp_path):
    root = _project(tmp_path / "p")
    run_dvc(["repro"], root)
    assert _trained(root) == ["attribution-a", "study-b"]
    before = (root / "out" / "attribution-a" / "metrics.json").read_bytes()

    assert save(root, "progress") == ["attribution-a"]  # the pattern: attribution-* only
    assert save(root, "progress") == []  # again: nothing new, nothing rewritten
    index = json.loads((root / "progress" / "index.json").read_text())
    assert list(index) == ["attribution-a"] and {"entry", "commit", "cpu", "saved"} <= set(index["attribution-a"])

    _new_machine(root)
    assert load(root, "progress") > 0
    run_dvc(["repro"], root)
    assert _trained(root) == ["study-b"]  # attribution-a restored from the run cache, not trained
    assert (root / "out" / "attribution-a" / "metrics.json").read_bytes() == before
    assert (root / "out" / "attribution-a" / "dvclive" / "ev.tsv").is_file()

    _new_machine(root)
    (root / "data.txt").write_text("other rows\n")  # an input that differs: DVC's key differs, it trains
    load(root, "progress")
    run_dvc(["repro"], root)
    assert _trained(root) == ["attribution-a", "study-b"]


def test_a_corrupted_saved_object_is_refused_before_anything_is_copied(tmp_path, capsys, monkeypatch):
    root = _project(tmp_path / "p")
    run_dvc(["repro", "train@attribution-a"], root)
    save(root, "progress")
    _new_machine(root)
    objects = sorted(p for p in (root / "progress" / "files").rglob("*") if p.is_file())
    objects[0].write_bytes(objects[0].read_bytes() + b" ")
    with pytest.raises(ProgressError, match=rf"{objects[0].name}: its md5 is not its name"):
        load(root, "progress")
    assert not (root / ".dvc" / "cache" / "runs").exists() and not (root / ".dvc" / "cache" / "files").exists()
    monkeypatch.chdir(root)
    assert main(["load", "--dir", "progress"]) == BAD_INPUT  # one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose run attribution-a trained and was saved to progress/ (copied by each test that damages it)."""
    root = _project(tmp_path_factory.mktemp("saved") / "p")
    run_dvc(["repro", "train@attribution-a"], root)
    assert save(root, "progress") == ["attribution-a"]
    return root


def _entry(store: Path) -> Path:
    return next((store / "runs").glob("*/*/*"))


def _edit_entry(store: Path) -> None:
    entry = _entry(store)
    entry.write_text(entry.read_text().replace("data.txt", "data.csv"))  # still an entry: another stage's


DAMAGE = {  # what: (the damage done to the store, the message, whether `save` reads it too)
    "index.json cut short": (lambda s: (s / "index.json").write_text((s / "index.json").read_text()[:40]),
                             r"index\.json: not readable JSON \(.*cut short\?\); restore it from git", True),
    "index.json not an index": (lambda s: (s / "index.json").write_text('["attribution-a"]'),
                                r"index\.json: not an index of saved runs", True),
    "index.json missing": (lambda s: (s / "index.json").unlink(),
                           r"index\.json: missing, while .*runs holds 1 saved run entries; restore it from git", True),
    "a run entry edited": (_edit_entry, r"the run entry does not hash to its name \(corrupted", False),
    "a run entry cut short": (lambda s: _entry(s).write_text(_entry(s).read_text()[:100]),
                              r"the run entry does not hash to its name", False),
    "a run entry gone": (lambda s: _entry(s).unlink(),
                         r"index\.json: run attribution-a's entry runs/.* is not in", False),
    "an output object gone": (lambda s: [p.unlink() for p in (s / "files").rglob("*") if p.is_file()],
                              r"names output object [0-9a-f]{32}.*, which is neither in .* nor in DVC's cache", False),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_missing_or_corrupt_file_of_the_store_is_refused_naming_it(
    damage: str, saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spoil, message, save_reads_it = DAMAGE[damage]
    root = tmp_path / "p"
    shutil.copytree(saved, root, symlinks=True)
    spoil(root / "progress")
    monkeypatch.chdir(root)
    if save_reads_it:  # the run is in DVC's cache: save would add to the index
        assert main(["save", "--dir", "progress"]) == BAD_INPUT
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and re.search(message, err), err
    _new_machine(root)
    with pytest.raises(ProgressError, match=message):
        load(root, "progress")
    assert not (root / ".dvc" / "cache" / "runs").exists() and not (root / ".dvc" / "cache" / "files").exists()
    assert main(["load", "--dir", "progress"]) == BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "progress" in err, err


@pytest.mark.parametrize("corrupt", ["run entry", "output object"])
def test_save_keeps_a_run_corrupted_in_dvc_s_cache_out_of_the_store(
    corrupt: str, saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "p"
    shutil.copytree(saved, root, symlinks=True)
    shutil.rmtree(root / "progress")
    cache = root / ".dvc" / "cache"
    if corrupt == "run entry":
        _edit_entry(cache)
    else:
        obj = next(p for p in (cache / "files" / "md5").rglob("*") if p.is_file() and not p.name.endswith(".dir"))
        obj.chmod(0o644)
        obj.write_bytes(obj.read_bytes() + b" ")
    capsys.readouterr()
    assert save(root, "progress") == []
    assert "not saved: attribution-a (DVC's cache holds " in capsys.readouterr().err
    assert not (root / "progress" / "runs").exists() and not (root / "progress" / "index.json").exists()
