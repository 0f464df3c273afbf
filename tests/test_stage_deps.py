"""Every DVC stage depends on the code it runs: each module its script imports (transitively, within this
repository: src/multitab, stages/) is covered by one of the stage's deps in dvc.yaml (the module's file, or a
folder above it). Editing such a module then re-runs the stage, and no table keeps numbers from old code.

The modules a script runs are computed from the code (tests/_imports.py, `runtime=True`), so a new import shows
up here without anyone keeping a list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from _imports import closure, import_graph, module_name
from multitab.registry import REGISTRY
from multitab.runs.stages import REPORTS

ROOT = Path(__file__).resolve().parents[1]
CODE_ROOTS = ("src/multitab", "stages")
_COMMAND = re.compile(r"python -m ([\w.${}]+)")
# the modules multitab.models imports by name (importlib), as the registry lists them
DYNAMIC = {"multitab.models": {entry.cls.partition(":")[0] for entry in REGISTRY.values()}}


def code_graph(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[str, str]]:
    """The runtime import graph of src/multitab and stages/, and module -> its file (relative to `root`)."""
    trees, files = [], {}
    for folder in CODE_ROOTS:
        for path in sorted((root / folder).rglob("*.py")):
            where = str(path.relative_to(root))
            trees.append((where, ast.parse(path.read_text(encoding="utf-8"), filename=where)))
            files[module_name(where)[0]] = where
    return import_graph(trees, runtime=True, dynamic=DYNAMIC), files


def stage_definitions(dvc_yaml: Path) -> dict[str, dict]:
    """name -> the stage's definition (a foreach stage's `do`), as dvc.yaml writes it (anchors resolved)."""
    stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    return {name: stage.get("do", stage) for name, stage in stages.items()}


def scripts(cmd: str) -> list[str]:
    """The modules a stage's command runs (`python -m stages.x`; `stages.${item.script}`: every report script)."""
    out = []
    for module in _COMMAND.findall(cmd):
        if module == "stages.${item.script}":
            out += [f"stages.{script}" for script, _ in REPORTS.values()]
        elif "${" not in module:
            out.append(module)
    return out


def uncovered(definition: dict, graph: dict[str, set[str]], files: dict[str, str]) -> list[str]:
    """`<file> (runs <script>)` for every file of a module the stage's scripts import that no dep covers."""
    deps = [d.rstrip("/") for d in map(str, definition.get("deps", [])) if "${" not in d]
    missing = []
    for script in scripts(definition["cmd"]):
        start = f"{script}.__main__" if f"{script}.__main__" in files else script
        assert start in files, f"{script}: no such module under {CODE_ROOTS}"
        for module in sorted(closure(graph, start)):
            path = files[module]
            if not any(path == d or path.startswith(d + "/") for d in deps):
                missing.append(f"{path} (runs {script})")
    return missing


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, set[str]], dict[str, str]]:
    return code_graph()


@pytest.mark.parametrize("stage", sorted(stage_definitions(ROOT / "dvc.yaml")))
def test_a_stage_depends_on_every_module_its_script_imports(stage: str, graph) -> None:
    missing = uncovered(stage_definitions(ROOT / "dvc.yaml")[stage], *graph)
    assert not missing, (f"dvc.yaml stage `{stage}` does not depend on code it runs: add these (or a folder above "
                         f"them) to its deps:\n" + "\n".join(sorted(set(missing))))


def test_the_model_registry_is_code_the_train_stage_runs(graph) -> None:
    modules = closure(graph[0], "stages.train")
    assert {"multitab.registry", "multitab.datasets.schema", "multitab.models.multitab_net"} <= modules


def test_the_rule_finds_an_import_the_deps_miss(tmp_path: Path) -> None:
    for path, text in {"stages/__init__.py": "", "stages/s.py": "from multitab.b import f\n",
                       "src/multitab/__init__.py": "def __getattr__(name):\n    from multitab import c\n",
                       "src/multitab/a/__init__.py": "", "src/multitab/a/x.py": "",
                       "src/multitab/b.py": "def f():\n    import multitab.a.x\n",
                       "src/multitab/c.py": ""}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph_, files = code_graph(tmp_path)
    stage = {"cmd": "python -m stages.s --out x", "deps": ["stages/s.py", "src/multitab/b.py"]}
    assert uncovered(stage, graph_, files) == [
        "src/multitab/__init__.py (runs stages.s)", "src/multitab/a/__init__.py (runs stages.s)",
        "src/multitab/a/x.py (runs stages.s)", "stages/__init__.py (runs stages.s)"]
    covered = {**stage, "deps": ["stages", "src/multitab/__init__.py", "src/multitab/a", "src/multitab/b.py"]}
    assert uncovered(covered, graph_, files) == []  # multitab.c: only a lazy attribute of the package imports it
