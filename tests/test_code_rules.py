"""Rules of the code base that a reviewer would otherwise check by eye: private names stay in their
module, params.yaml is read only by the config package, and the config package sits below the rest (it
imports only the leaf modules it checks names and values against)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = [ROOT / "src" / "multitab", ROOT / "stages", ROOT / "flows", ROOT / "benchmarks"]
CONFIG = ROOT / "src" / "multitab" / "config"
# What the config package may import from the project: itself and the leaf modules holding the facts it
# checks against (the dataset schemas, the model names, the protocols) or reads with (YAML, files).
CONFIG_MAY_IMPORT = ("multitab.config", "multitab.io", "multitab.protocol", "multitab.names",
                     "multitab.datasets.schema")
YAML_READERS = {"read_yaml_file", "load_yaml", "safe_load", "load"}

Module = tuple[str, ast.Module]  # (where, tree)
_PARAMS = re.compile(r"(?<![A-Za-z_])params")  # params.yaml, params_path; not hparams/...


def _modules() -> list[Module]:
    return [(str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
            for folder in CODE for path in sorted(folder.rglob("*.py"))]


def _imports(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of every `from M import name` (a relative M with its dots)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                yield node.lineno, "." * node.level + (node.module or ""), alias.name


def private_imports(modules: Iterable[Module]) -> list[str]:
    return [f"{where}:{line}: from {module} import {name}" for where, tree in modules
            for line, module, name in _imports(tree) if name.startswith("_") and not name.startswith("__")]


def params_reads(modules: Iterable[Module], config_folder: str) -> list[str]:
    """Calls of a YAML reader whose arguments mention params, outside the config package."""
    found = []
    for where, tree in modules:
        if where.startswith(config_folder):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if func in YAML_READERS and _PARAMS.search(ast.unparse(node)):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def config_imports(modules: Iterable[Module], config_folder: str) -> list[str]:
    found = []
    for where, tree in modules:
        if not where.startswith(config_folder):
            continue
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{where}:{node.lineno}: {m}" for m in names
                      if m.startswith("multitab") and not m.startswith(CONFIG_MAY_IMPORT)]
    return found


CONFIG_FOLDER = str(CONFIG.relative_to(ROOT)) + "/"


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports(_modules())
    assert not found, "a name another module uses is public (drop its underscore):\n" + "\n".join(found)


def test_params_yaml_is_read_only_by_the_config_package() -> None:
    found = params_reads(_modules(), CONFIG_FOLDER)
    assert not found, "read params.yaml through multitab.config (load_params, read_yaml):\n" + "\n".join(found)


def test_the_config_package_imports_only_leaf_modules() -> None:
    found = config_imports(_modules(), CONFIG_FOLDER)
    assert not found, "multitab.config sits below the other packages:\n" + "\n".join(found)


def test_each_rule_catches_what_it_describes() -> None:
    bad = ("from multitab.io import _private\n"
           "import yaml\nraw = yaml.safe_load(open('params.yaml'))\n")
    assert private_imports([("stages/x.py", ast.parse(bad))]) == ["stages/x.py:1: from multitab.io import _private"]
    assert params_reads([("stages/x.py", ast.parse(bad))], CONFIG_FOLDER) == [
        "stages/x.py:3: yaml.safe_load(open('params.yaml'))"]
    assert params_reads([(CONFIG_FOLDER + "x.py", ast.parse(bad))], CONFIG_FOLDER) == []
    upward = "from multitab.training.loop import fit\nimport multitab.models\n"
    assert config_imports([(CONFIG_FOLDER + "x.py", ast.parse(upward))], CONFIG_FOLDER) == [
        f"{CONFIG_FOLDER}x.py:1: multitab.training.loop", f"{CONFIG_FOLDER}x.py:2: multitab.models"]
