"""The project's import graph, computed from the code (ast): which of its modules each module imports.

Two readings of one graph:
- `import_graph(trees)`: every import statement counts (module level, inside a function, under TYPE_CHECKING),
  `from package import name` as an import of the package's __init__ (and of the submodule, when `name` is one).
  An import cycle here ties two modules together even when Python happens to run it (tests/test_code_rules.py).
- `import_graph(trees, runtime=True)`: what importing the module runs: type-checking-only imports and the lazy
  attributes of a module-level `__getattr__` (PEP 562) left out; each package's __init__ that Python runs before a
  submodule counted; and multitab.models' classes, which it imports by name from multitab.registry
  (importlib), counted as its imports. The code a stage runs is the closure of its script under this reading
  (tests/test_stage_deps.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

Module = tuple[str, ast.Module]  # (path relative to the repository root, tree)


def module_name(where: str) -> tuple[str, bool]:
    """`src/multitab/a/b.py` -> (`multitab.a.b`, False); `stages/__init__.py` -> (`stages`, True)."""
    parts = list(Path(where).with_suffix("").parts)
    parts = parts[1:] if parts[0] == "src" else parts
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _skipped_at_runtime(tree: ast.Module) -> set[int]:
    """ids of the import nodes that importing the module does not run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        type_only = isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        if type_only:
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            skipped |= {id(n) for n in ast.walk(node)}
    return skipped


def _named(tree: ast.Module, module: str, package: bool, skipped: set[int]) -> set[str]:
    named: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    return named


def import_graph(trees: Iterable[Module], runtime: bool = False,
                 dynamic: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """module -> the project's modules it imports (each import resolved to the longest module it names);
    `dynamic`: imports by name the code makes (module -> modules), added under `runtime`."""
    trees = list(trees)
    known = {module_name(where)[0] for where, _ in trees}

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for where, tree in trees:
        module, package = module_name(where)
        named = _named(tree, module, package, _skipped_at_runtime(tree) if runtime else set())
        if runtime:  # Python runs every enclosing package's __init__ first
            parts = module.split(".")
            named.update(".".join(parts[:i]) for i in range(1, len(parts)))
            named.update((dynamic or {}).get(module, ()))
        graph[module] = {m for m in map(owner, named) if m is not None and m != module}
    return graph


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    """`start` and every module it reaches."""
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles
