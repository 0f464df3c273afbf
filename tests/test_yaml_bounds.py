"""Nothing the project loads can exhaust memory: every YAML file goes through one loader
(multitab.files.yaml_data) that refuses a "billion laughs" (nested aliases), an alias inside its own collection
and runaway nesting before anything is built, naming the file; error messages quote values cut short."""

from __future__ import annotations

import ast
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multitab.config import ConfigError, parse_yaml
from multitab.files.integrity import read_lock
from multitab.files.stage_deps import load_safe
from multitab.files.yaml_data import MAX_ALIAS_VALUES, YamlLimitError, load_yaml, read_yaml_file
from multitab.runs.document import read_runs_file
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]


def laughs(key: str = "protocol", levels: int = 9) -> str:
    """A few hundred bytes whose aliases expand to 10**(levels + 1) strings, under `key`."""
    parts = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    parts += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return f"{key}: [" + ", ".join(parts) + "]\n"


def _limited(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`args` in a child whose address space is capped (2 GB): unbounded growth ends in MemoryError, not in
    the machine's memory; the timeout ends one that would take long."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, preexec_fn=cap)


def test_the_loader_refuses_nested_aliases_naming_the_line() -> None:
    with pytest.raises(YamlLimitError, match=rf"more than {MAX_ALIAS_VALUES:,} values") as e:
        load_yaml(laughs())
    assert e.value.problem_mark is not None and e.value.problem_mark.line == 0
    # a few aliases of a small list, as params.yaml uses them, load as before
    assert load_yaml("seeds: &s [0, 1, 2]\na: {seeds: *s}\nb: {seeds: *s}\n") == {
        "seeds": [0, 1, 2], "a": {"seeds": [0, 1, 2]}, "b": {"seeds": [0, 1, 2]}}


@pytest.mark.parametrize(("text", "match"), [
    ("a: &a [1, *a]\n", r"alias \*a refers to a collection that holds it"),
    ("[" * 100_000 + "]" * 100_000, r"nest deeper than 200 levels"),
    ("- " * 100_000 + "x\n", r"nest deeper than 200 levels"),
])
def test_the_loader_refuses_self_reference_and_runaway_nesting(text: str, match: str) -> None:
    with pytest.raises(YamlLimitError, match=match):
        load_yaml(text)


def test_merges_may_override_a_key_and_a_key_given_twice_is_refused() -> None:
    # dvc.yaml's shape: a stage template merged in, one key of it given again
    assert load_yaml("t: &t {cmd: x, params: [a]}\ns: {<<: *t, params: [b]}\n")["s"] == {"cmd": "x", "params": ["b"]}
    with pytest.raises(yaml.YAMLError, match=r"key 'lr' appears twice in one mapping \(first at line 1\)"):
        load_yaml("lr: 1\nlr: 2\n")


def test_every_reader_of_yaml_refuses_nested_aliases(tmp_path: Path) -> None:
    bomb = tmp_path / "file.yaml"
    bomb.write_text(laughs("stages"))
    with pytest.raises(ValueError, match=rf"{bomb}: refused: line 1, column \d+: aliases"):
        read_yaml_file(bomb)  # hyperparameter files, recipes, icl.lock
    with pytest.raises(ConfigError, match=r"params.yaml: refused: line 1"):
        parse_yaml(bomb.read_text(), "params.yaml")
    with pytest.raises(YamlLimitError):
        load_safe(bomb)  # dvc.yaml and the files of its `vars`, as DVC would read them
    assert read_runs_file(bomb) is None  # runs.yaml: unreadable, so written again
    (tmp_path / "dvc.lock").write_text(laughs("stages"))
    with pytest.raises(ValueError, match="not a readable DVC lock file"):
        read_lock(tmp_path, tries=1)


def test_python_m_multitab_runs_refuses_a_billion_laughs_params_file(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(laughs())
    done = _limited([sys.executable, "-m", "multitab.runs", "--params", str(params), "--out",
                     str(tmp_path / "runs.yaml")], ROOT)
    assert done.returncode == BAD_INPUT, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: {params}: refused: line 1, column ") and "aliases" in done.stderr
    assert not (tmp_path / "runs.yaml").exists()


def test_make_repro_refuses_a_billion_laughs_params_file_before_dvc_reads_it(tmp_path: Path) -> None:
    """DVC's own loader has no bound (docs/orchestration.md): the flow reads params.yaml with ours first."""
    params = tmp_path / "params.yaml"
    params.write_text(laughs())
    done = _limited([sys.executable, "-m", "flows.pipeline", "--params", str(params)], ROOT)
    assert done.returncode == BAD_INPUT, done.stderr[-2000:]
    assert done.stderr.startswith(f"flows.pipeline: {params}: refused: line 1, column "), done.stderr[-2000:]


def test_a_hyperparameter_file_of_nested_aliases_is_refused_naming_it(tmp_path: Path) -> None:
    hparams = tmp_path / "mine.yaml"  # what MultiTaskEstimator(hparams=...) and every run read with
    hparams.write_text("model:\n  d_embedding: 4\n  " + laughs("d_hidden"))
    code = f"from pathlib import Path; from multitab.hparams import read; read(Path({str(hparams)!r}))"
    done = _limited([sys.executable, "-c", code], ROOT)
    assert f"ValueError: {hparams}: refused: line 3, column " in done.stderr, done.stderr[-2000:]


def test_config_errors_quote_a_large_value_cut_short() -> None:
    from multitab.config import parse_params

    big = list(range(200_000))
    with pytest.raises(ConfigError) as e:
        parse_params({"protocol": big}, "params.yaml")
    assert str(e.value).startswith("params.yaml: protocol=[0, 1, 2, 3, 4, 5, ...] must be one of")
    assert len(str(e.value)) < 300


def test_no_module_loads_yaml_but_the_one_loader() -> None:
    """yaml.load / safe_load / full_load and PyYAML's loader classes appear only in multitab/files/yaml_data.py."""
    calls = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "compose", "parse"}
    found = []
    for folder in (ROOT / "src" / "multitab", ROOT / "stages"):
        for path in sorted(folder.rglob("*.py")):
            if path == ROOT / "src" / "multitab" / "files" / "yaml_data.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml"
                        and (node.attr in calls or node.attr.endswith("Loader"))):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: yaml.{node.attr}")
    assert not found, "read YAML with multitab.files.yaml_data (load_yaml, read_yaml_file):\n" + "\n".join(found)
