"""Rules of the code base that a reviewer would otherwise check by eye: private names stay in their
module, params.yaml is read only by the config package, the config package sits below the rest (it
imports only the leaf modules it checks names and values against), and the library's packages import
only downwards, in the layer order LAYERS states (docs/architecture.md draws it)."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from _imports import import_cycles, import_graph

ROOT = Path(__file__).resolve().parents[1]
CODE = [ROOT / "src" / "multitab", ROOT / "stages", ROOT / "flows", ROOT / "benchmarks"]
CONFIG = ROOT / "src" / "multitab" / "config"
# What the config package may import from the project: itself and the leaf modules holding the facts it
# checks against (the dataset schemas, the model names, the protocols) or reads with (YAML, files).
CONFIG_MAY_IMPORT = ("multitab.config", "multitab.files.io", "multitab.files.yaml_data", "multitab.protocol",
                     "multitab.registry")
YAML_READERS = {"read_yaml_file", "load_yaml", "safe_load", "load"}

Module = tuple[str, ast.Module]  # (where, tree)
_PARAMS = re.compile(r"(?<![A-Za-z_])params")  # params.yaml, params_path; not hparams/...


@functools.cache
def _modules() -> tuple[Module, ...]:
    """Every module parsed once for all the rules (read-only: the rules walk the trees)."""
    return tuple((str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
            for folder in CODE for path in sorted(folder.rglob("*.py")))


def _imports(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of every `from M import name` (a relative M with its dots)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                yield node.lineno, "." * node.level + (node.module or ""), alias.name


PROJECT_PACKAGES = ("multitab", "stages", "flows", "benchmarks", ".")


def private_imports(modules: Iterable[Module]) -> list[str]:
    """Private names imported from another of the project's modules (a library's own private helpers, such as
    scikit-learn's `_fit_context` for an estimator's parameter validation, are its API to us)."""
    return [f"{where}:{line}: from {module} import {name}" for where, tree in modules
            for line, module, name in _imports(tree)
            if name.startswith("_") and not name.startswith("__") and module.startswith(PROJECT_PACKAGES)]


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
LIBRARY = ROOT / "src" / "multitab"

# multitab's packages and top-level modules, bottom layer first. A module may import from its own layer and
# the layers below it, never from one above: at module level, inside a function and under TYPE_CHECKING
# alike (an import that runs late is still a dependency, and a cycle once the two ends are loaded). Within
# a layer anything goes but a cycle (test_no_import_cycles). The run matrix (multitab.runs) is layered module by
# module (`runs.<module>`; its package docstring draws it). stages/, flows/ and benchmarks/ sit above all of it;
# the library never imports them. A new package or top-level module gets a place here.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("runtime", "registry", "protocol", "markup"),  # exit codes, processes, provenance; model names; escaping
    ("files",),  # atomic writes; files checked against pins and dvc.lock's hashes
    ("config",),  # params.yaml, strictly typed
    ("datasets",),  # schemas, sources, splits, preprocessing, MultiTab-Bench; a table's feature kinds
    ("metrics",),  # per-task metrics: training and the in-context runs score with them
    ("models",),
    ("validation",),  # Great Expectations: the training path below never imports it
    ("hparams",),  # the per-model hyperparameter files
    # the run matrix: types -> expansion -> resolution -> checks -> runs.yaml -> command line
    ("runs",),
    ("runs.types", "runs.profiles", "runs.record", "runs.locate"),
    ("runs.arms", "runs.expand", "runs.stages"),
    ("runs.resolve",),
    ("runs.check",),
    ("runs.document",),
    ("runs.cli", "runs.__main__"),
    ("training",),
    ("icl",),  # pretrained in-context models, scored on the processed data with training's data path
    ("estimator", "input_table"),  # the models as a scikit-learn estimator, trained by the training loop
    ("evaluation",),  # aggregate: the paper's tables, MultiTab-Bench, the sweeps' selection
)
SUBLAYERED = ("runs",)  # packages whose modules have layers of their own
LAYER_OF = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}
ABOVE_THE_LIBRARY = ("stages", "flows", "benchmarks")


def _module_name(where: str) -> str:
    """src/multitab/a/b.py -> multitab.a.b; src/multitab/a/__init__.py -> multitab.a."""
    parts = Path(where).with_suffix("").parts[1:]  # without src/
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, package: bool) -> list[str]:
    """The modules an import statement names, relative ones made absolute; `from multitab import x` names
    multitab.x."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parent = module.split(".")[:len(module.split(".")) - node.level + (1 if package else 0)]
        base = ".".join(parent + ([node.module] if node.module else []))
    if base == "multitab":
        return [f"multitab.{alias.name}" for alias in node.names]
    return [base]


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "multitab" or len(parts) < 2:
        return None
    return ".".join(parts[1:3]) if parts[1] in SUBLAYERED and len(parts) > 2 else parts[1]


def upward_imports(modules: Iterable[Module]) -> list[str]:
    """Every import of the library's modules (src/multitab/...) that goes up LAYERS or out to stages/,
    flows/ or benchmarks/; a package or top-level module without a layer is reported once."""
    found: list[str] = []
    unplaced: set[str] = set()
    for where, tree in modules:
        module = _module_name(where)
        unit = _unit(module)
        if unit is None:
            continue
        if unit not in LAYER_OF:
            unplaced.add(unit)
            continue
        for node in ast.walk(tree):
            for target in _imported(node, module, where.endswith("__init__.py")):
                if target.split(".")[0] in ABOVE_THE_LIBRARY:
                    found.append(f"{where}:{node.lineno}: {target} (the library never imports {target.split('.')[0]}/)")
                    continue
                other = _unit(target)
                if other is None or other == unit:
                    continue
                if other not in LAYER_OF:
                    unplaced.add(other)
                elif LAYER_OF[other] > LAYER_OF[unit]:
                    found.append(f"{where}:{node.lineno}: {target} ({unit}, layer {LAYER_OF[unit]}, "
                                 f"imports {other}, layer {LAYER_OF[other]})")
    return found + [f"multitab.{unit} has no place in LAYERS" for unit in sorted(unplaced)]


def test_no_private_name_is_imported_across_modules() -> None:
    found = private_imports(_modules())
    assert not found, "a name another module uses is public (drop its underscore):\n" + "\n".join(found)


def test_params_yaml_is_read_only_by_the_config_package() -> None:
    found = params_reads(_modules(), CONFIG_FOLDER)
    assert not found, "read params.yaml through multitab.config (load_params, read_yaml):\n" + "\n".join(found)


def test_the_config_package_imports_only_leaf_modules() -> None:
    found = config_imports(_modules(), CONFIG_FOLDER)
    assert not found, "multitab.config sits below the other packages:\n" + "\n".join(found)


def test_the_library_imports_only_downwards() -> None:
    library = [(where, tree) for where, tree in _modules() if where.startswith("src/")]
    assert len(library) > 100, "the library's modules were not found"
    found = upward_imports(library)
    assert not found, ("move what both sides need down to a layer both may import "
                       "(tests/test_code_rules.py LAYERS):\n" + "\n".join(found))


def test_every_layer_names_something_that_exists() -> None:
    missing = [unit for unit in LAYER_OF if not (LIBRARY / unit.replace(".", "/")).is_dir()
               and not (LIBRARY / f"{unit.replace('.', '/')}.py").is_file()]
    assert not missing, f"LAYERS names what src/multitab no longer has: {missing}"


# Sizes a newcomer reads at once: the DAG's file, each module of the library, and each flow, stage and
# benchmark script (and the modules beside them).
MAX_LINES = {"dvc.yaml": 250, "src/multitab/**/*.py": 350, "flows/**/*.py": 350, "stages/**/*.py": 350,
             "benchmarks/**/*.py": 350}


def too_long(root: Path, limits: dict[str, int]) -> list[str]:
    """`path: N lines (at most M)` for every file matching a pattern of `limits` that is longer."""
    found = []
    for pattern, limit in limits.items():
        for path in sorted(root.glob(pattern)):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                found.append(f"{path.relative_to(root)}: {n} lines (at most {limit})")
    return found


def test_the_dag_file_and_every_library_module_stay_short() -> None:
    found = too_long(ROOT, MAX_LINES)
    assert not found, "split the module along its seams, or fold repeated stages (YAML anchors):\n" + "\n".join(found)


def test_the_size_rule_counts_lines(tmp_path: Path) -> None:
    (tmp_path / "dvc.yaml").write_text("stages:\n" * 3)
    assert too_long(tmp_path, {"dvc.yaml": 3}) == []
    assert too_long(tmp_path, {"dvc.yaml": 2}) == ["dvc.yaml: 3 lines (at most 2)"]


def test_each_rule_catches_what_it_describes() -> None:
    bad = ("from multitab.files.io import _private\n"
           "import yaml\nraw = yaml.safe_load(open('params.yaml'))\n")
    assert private_imports([("stages/x.py", ast.parse(bad))]) == [
        "stages/x.py:1: from multitab.files.io import _private"]
    assert private_imports([("x.py", ast.parse("from sklearn.base import _fit_context\nfrom .a import _b\n"))]) == [
        "x.py:2: from .a import _b"]
    assert params_reads([("stages/x.py", ast.parse(bad))], CONFIG_FOLDER) == [
        "stages/x.py:3: yaml.safe_load(open('params.yaml'))"]
    assert params_reads([(CONFIG_FOLDER + "x.py", ast.parse(bad))], CONFIG_FOLDER) == []
    upward = "from multitab.training.loop import fit\nimport multitab.models\n"
    assert config_imports([(CONFIG_FOLDER + "x.py", ast.parse(upward))], CONFIG_FOLDER) == [
        f"{CONFIG_FOLDER}x.py:1: multitab.training.loop", f"{CONFIG_FOLDER}x.py:2: multitab.models"]
    late = ("from multitab.files.io import write_text\nfrom multitab import metrics\n"
            "def f():\n    from multitab.evaluation import tables\n    from . import loop\n    import flows.pipeline\n")
    assert upward_imports([("src/multitab/training/x.py", ast.parse(late))]) == [
        f"src/multitab/training/x.py:4: multitab.evaluation (training, layer {LAYER_OF['training']}, "
        f"imports evaluation, layer {LAYER_OF['evaluation']})",
        "src/multitab/training/x.py:6: flows.pipeline (the library never imports flows/)"]
    assert upward_imports([("src/multitab/icl/__init__.py", ast.parse("from .records import X\n"))]) == []
    assert upward_imports([("src/multitab/models/x.py", ast.parse("from ..training import loop\n"))]) == [
        f"src/multitab/models/x.py:1: multitab.training (models, layer {LAYER_OF['models']}, "
        f"imports training, layer {LAYER_OF['training']})"]
    assert upward_imports([("src/multitab/newpkg/x.py", ast.parse(""))]) == ["multitab.newpkg has no place in LAYERS"]


# ---- Import cycles among src/, flows/ and stages/: computed from the code, every import counted (module level,
# inside a function, under TYPE_CHECKING), `from package import name` as an import of the package's __init__ (and
# of the submodule, when `name` is one). Python runs such a cycle only in some import orders; a cycle dodged by an
# import inside a function still ties the two modules together.
CYCLE_ROOTS = {"src": ROOT / "src", "flows": ROOT / "flows", "stages": ROOT / "stages"}


def test_no_import_cycles() -> None:
    trees = [(where, tree) for where, tree in _modules() if where.split("/")[0] in CYCLE_ROOTS]
    assert len(trees) > 150, "the modules were not found"
    cycles = import_cycles(import_graph(trees))
    assert not cycles, ("move what both sides share to the module it belongs in (no import inside a function "
                        "to dodge it):\n" + "\n".join(" <-> ".join(c) for c in cycles))


def test_the_cycle_rule_catches_a_cycle_however_it_is_written() -> None:
    def trees(files: dict[str, str]) -> list[Module]:
        return [(where, ast.parse(text)) for where, text in files.items()]
    late = trees({"src/multitab/a.py": "from multitab.b import x\n",
                  "src/multitab/b.py": "def f():\n    from multitab import a\n"})
    assert import_cycles(import_graph(late)) == [["multitab.a", "multitab.b"]]
    through_init = trees({"src/multitab/p/__init__.py": "from multitab.p.m import y\n",
                          "src/multitab/p/m.py": "from multitab.p import z\n"})
    assert import_cycles(import_graph(through_init)) == [["multitab.p", "multitab.p.m"]]
    relative = trees({"src/multitab/p/__init__.py": "", "src/multitab/p/m.py": "from .n import y\n",
                      "src/multitab/p/n.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from . import m\n"})
    assert import_cycles(import_graph(relative)) == [["multitab.p.m", "multitab.p.n"]]
    one_way = trees({"src/multitab/a.py": "import multitab.b\n", "src/multitab/b.py": "import os\n",
                     "flows/f.py": "from multitab.a import x\n"})
    assert import_cycles(import_graph(one_way)) == []


# The top of src/multitab reads as the architecture: packages, and a few modules that belong to none.
MAX_TOP_LEVEL_MODULES = 12


def test_few_modules_sit_at_the_top_of_the_library() -> None:
    loose = sorted(p.name for p in LIBRARY.glob("*.py"))
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, f"group these into packages by what they are: {loose}"
