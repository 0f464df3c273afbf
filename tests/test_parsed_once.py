"""multitab.files.parsed_once: a stage's DVC process parses a project's YAML file once per content, and the next
process reads the parse back; what DVC gets is what its own parse gives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from _toy_dvc import PY, make_project, write_stage
from multitab.files import parsed_once
from multitab.files.parsed_once import CACHE_DIR, Parsed


def test_a_file_is_parsed_once_per_content_also_by_the_next_process(tmp_path):
    f = tmp_path / "runs.yaml"
    f.write_text("a: 1\nb: [1, 2.5, null, true]\nc: {d: e}\n")
    parses = []

    def parse():
        parses.append(f.read_bytes())
        return yaml.safe_load(f.read_text())

    first = Parsed(tmp_path)
    got = first.get(f, f.read_bytes(), parse)
    assert got == {"a": 1, "b": [1, 2.5, None, True], "c": {"d": "e"}}
    got["a"] = 99  # each reader gets its own copy
    assert first.get(f, f.read_bytes(), parse)["a"] == 1 and len(parses) == 1
    assert Parsed(tmp_path).get(f, f.read_bytes(), parse) == {"a": 1, "b": [1, 2.5, None, True], "c": {"d": "e"}}
    assert len(parses) == 1  # the next process: the JSON copy

    f.write_text("a: 2\n")
    assert Parsed(tmp_path).get(f, f.read_bytes(), parse) == {"a": 2} and len(parses) == 2
    assert len(list((tmp_path / CACHE_DIR).glob("*.json"))) == 1  # the earlier content's copy is gone

    f.write_text("when: 2024-01-02\n")  # a date: JSON would give text back, so no copy on disk
    for _ in range(2):
        assert Parsed(tmp_path).get(f, f.read_bytes(), parse) == yaml.safe_load(f.read_text())
    assert len(parses) == 4


def test_dvc_reads_a_params_file_once_and_its_answers_are_unchanged(tmp_path, monkeypatch):
    """In a DVC project with a params dependency, DVC's status of the stage after `install` is the same as
    without it, and the params file is parsed once, its values looked up once, however often DVC reads it."""
    import dvc.dependency.param as param
    import dvc.utils.serialize as serialize
    from dvc.dvcfile import Lockfile
    from dvc.repo import Repo

    stage = write_stage("s")
    stage["params"] = [{"knobs.yaml": ["lr"]}]
    root = make_project(tmp_path / "p", {"s": stage})
    (root / "knobs.yaml").write_text("lr: 0.001\nother: [1, 2]\n")
    subprocess.run([PY, "-m", "dvc", "repro", "-q"], cwd=root, check=True, capture_output=True)
    (root / "knobs.yaml").write_text("lr: 0.01\nother: [1, 2]\n")
    monkeypatch.chdir(root)  # DVC names stages relative to the current folder
    with Repo(str(root)) as repo:
        expected = repo.status()

    for module, name in ((serialize, "load_path"), (param, "load_path"), (param, "read_param_file"),
                         (Lockfile, "_load_yaml")):
        monkeypatch.setattr(module, name, getattr(module, name))  # put back after the test
    parses, lookups = [], []
    load_yaml = serialize.LOADERS[".yaml"]
    monkeypatch.setitem(serialize.LOADERS, ".yaml", lambda path, **kw: parses.append(path) or load_yaml(path, **kw))
    read_param_file = param.read_param_file
    monkeypatch.setattr(param, "read_param_file", lambda fs, path, *a, **kw: lookups.append(Path(path).name)
                        or read_param_file(fs, path, *a, **kw))
    parsed_once.install(root)
    with Repo(str(root)) as repo:
        assert repo.status() == expected == {"s": [{"changed deps": {"knobs.yaml": {"lr": "modified"}}}]}
        (s,) = repo.stage.collect("s")
        for dep in s.deps:
            dep.get_hash()
    assert sorted(Path(p).name for p in parses) == ["knobs.yaml", "params.yaml"]  # each once (params.yaml: `vars`)
    assert lookups == ["knobs.yaml"]  # the dependency's values looked up once, however often DVC hashes it
