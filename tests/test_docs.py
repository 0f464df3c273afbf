"""The README stays a short entry point (the two commands first) and every relative link in it and in docs/
reaches a file that exists, and a heading there when it names one."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) < 150, len(lines)
    block = text[text.index("```") + 3:]
    block = block[:block.index("```")]
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "repro"], ["make", "test"]]


def test_readme_says_first_what_to_open_and_how_to_compare() -> None:
    """The README's first screen (20 lines): what to open after `make repro`, and `make compare` for experiments."""
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "results/index.html" in head and "make compare" in head and "make help" in head


def test_make_help_lists_every_target_with_a_line() -> None:
    """`make help` names every target of the Makefile, each with what it does."""
    targets = re.findall(r"^([a-z][a-z0-9_-]*):(?![:=])", (ROOT / "Makefile").read_text(), re.MULTILINE)
    done = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "help"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    listed = dict(re.findall(r"^\s*make (\S+) +(\S.*)$", done.stdout, re.MULTILINE))
    assert "repro" in targets and "help" in targets
    assert [t for t in targets if t not in listed] == [], done.stdout


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


# A path of the code (src/multitab/..., stages/..., flows/..., benchmarks/..., tests/...) or a dotted module
# (multitab.x.y, flows.x, stages.x) that a page names.
CODE_PATH = re.compile(r"(?<![\w/.-])((?:src/multitab|stages|flows|benchmarks|tests)/[\w/.-]*[\w/])")
DOTTED = re.compile(r"(?<![\w./-])((?:multitab|flows|stages)(?:\.\w+)+)(?![\w/-])")
NOT_MODULES = {"md", "py", "yaml", "yml", "json", "lock", "html"}
# setup.md tells its story: a console script once pointed at multitab.cli;
# extending.md's example adds multitab.models.toy
NEVER_EXISTED = {"multitab.cli", "multitab.models.toy"}


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath("src" if parts[0] == "multitab" else "", *parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def stale_code_names(text: str) -> list[str]:
    """The code paths and dotted modules in `text` that name nothing: a dotted name is a module, or a module
    and a name defined at its top level (multitab.models.build_model; an attribute after that,
    multitab.hparams.Hparams.with_point, is not followed)."""
    stale = [path for path in sorted(set(CODE_PATH.findall(text))) if not (ROOT / path).exists()]
    for dotted in sorted(set(DOTTED.findall(text)) - NEVER_EXISTED):
        parts = dotted.split(".")
        if parts[-1] in NOT_MODULES:
            continue
        longest = next((n for n in range(len(parts), 1, -1) if _module_file(parts[:n])), 0)
        if longest == len(parts):
            continue
        module = _module_file(parts[:longest]) if longest else None
        if module is None or parts[longest] not in _top_level_names(module):
            stale.append(dotted)
    return stale


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_code_a_page_names_exists(doc: Path) -> None:
    stale = stale_code_names(doc.read_text())
    assert not stale, f"{doc.relative_to(ROOT)} names code that is not there (moved or renamed?): {stale}"


def test_a_stale_code_name_is_caught() -> None:
    text = ("`src/multitab/gone.py`, stages/acquire.py, multitab.evaluation.metrics_old, multitab.models.build_model, "
            "multitab.models.no_such_name, flows.pipeline, docs/flows.md, multitab.runs, multitab.hparams.Hparams.x, "
            "flows.gone.main")
    assert stale_code_names(text) == ["src/multitab/gone.py", "flows.gone.main", "multitab.evaluation.metrics_old",
                                      "multitab.models.no_such_name"]


ARCHITECTURE = ROOT / "docs" / "architecture.md"
BARE_FILE = re.compile(r"(?<![\w/.-])((?:\w+/)*\w+\.py)\b")


def test_architecture_page_names_existing_files_and_draws_the_enforced_layers() -> None:
    from test_code_rules import LAYERS

    text = ARCHITECTURE.read_text()
    code = [ROOT / "src", ROOT / "stages", ROOT / "flows", ROOT / "benchmarks", ROOT / "tests"]
    missing = [name for name in sorted(set(BARE_FILE.findall(text)))
               if not any(next(folder.rglob(name), None) or (folder.parent / name).is_file() for folder in code)]
    assert not missing, f"docs/architecture.md names files that are not there: {missing}"
    block = text[text.index("## The library's layers"):]
    block = block[block.index("```") + 4:]
    block = block[:block.index("```")]
    drawn = [tuple(token.rstrip("/").removesuffix(".py").replace("/", ".") for token in line[1:].split("  ")[0].split())
             for line in block.splitlines() if line.startswith(" ") and not line.startswith("  ")]
    assert drawn[::-1] == list(LAYERS), \
        "the layers drawn in docs/architecture.md differ from tests/test_code_rules.py LAYERS"
    table = text[text.index("## The stages"):]
    table = table[:table.index("\n\n", table.index("| Stage"))]
    named = {name.partition("@")[0] for row in table.splitlines()[3:]
             for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
    stages = set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])
    assert named and named <= stages, \
        f"docs/architecture.md's stage table names stages dvc.yaml lacks: {named - stages}"
