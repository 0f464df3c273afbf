"""Which paths a DVC stage depends on, read without DVC: dvc.yaml's definition of the stage (its `foreach` /
`matrix` item and `${...}` references resolved against params.yaml and the `vars` files, as DVC resolves
them) and the stage's entry in dvc.lock (what it depended on when it last ran).

DVC names the stage it runs in the command's environment (DVC_STAGE, e.g. `preprocess@acs_income`; DVC_ROOT
is the project), so a stage script can find its own definition. Importing DVC for this would cost seconds
per stage, and DVC on every machine that runs a stage. params.yaml is read here as DVC reads it, as the
context of dvc.yaml's `${...}`; no setting is taken from it (stages read theirs through multitab.config). A
reference this resolver cannot follow (a `vars` entry of another form, a nested expression) leaves that path
out, and dvc.lock's entry still names it once the stage has run. A wrong path here can only leave a file
unchecked: it is then nobody's output, or an output that is checked against its own record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import product
from pathlib import Path
from typing import Any

from multitab.files.yaml_data import load_yaml

_REF = re.compile(r"\$\{\s*([^${}]+?)\s*\}")


class Unresolved(LookupError):
    """A `${...}` reference that names nothing this resolver knows."""


def load_safe(path: Path) -> Any:
    """A YAML file as plain data (multitab.files.yaml_data: nothing in it can construct objects or run code,
    its aliases are bounded); raises yaml.YAMLError."""
    return load_yaml(path.read_bytes())


def _to_str(value: Any) -> str:
    if isinstance(value, bool):  # DVC writes booleans as YAML does
        return "true" if value else "false"
    return str(value)


def _lookup(expr: str, context: Mapping[str, Any]) -> Any:
    value: Any = context
    for part in expr.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise Unresolved(expr)
    return value


def interpolate(text: str, context: Mapping[str, Any]) -> Any:
    """`text` with every `${a.b}` replaced from `context`; a text that is one reference gives its value."""
    whole = _REF.fullmatch(text)
    if whole:
        return _lookup(whole.group(1), context)
    return _REF.sub(lambda m: _to_str(_lookup(m.group(1), context)), text)


def _context(root: Path, dvc_yaml: Mapping[str, Any]) -> dict[str, Any]:
    """params.yaml (DVC reads it by default) with the `vars` files and mappings laid over it."""
    context: dict[str, Any] = {}
    sources: list[Any] = ["params.yaml", *(dvc_yaml.get("vars") or [])]
    for source in sources:
        if isinstance(source, Mapping):
            context.update(source)
            continue
        name, _, keys = str(source).partition(":")
        path = root / name
        if not path.is_file():
            continue
        data = load_safe(path)
        if isinstance(data, Mapping):
            wanted = [k.strip() for k in keys.split(",") if k.strip()]
            context.update({k: data[k] for k in wanted if k in data} if wanted else data)
    return context


def _items(definition: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """The members of a `foreach` or `matrix` stage by key, as DVC names them (`stage@<key>`)."""
    if "foreach" in definition:
        iterable = definition["foreach"]
        if isinstance(iterable, str):
            iterable = interpolate(iterable, context)
        if isinstance(iterable, Mapping):
            return {_to_str(k): v for k, v in iterable.items()}
        if any(isinstance(v, Mapping | list) for v in iterable):
            return {str(i): v for i, v in enumerate(iterable)}
        return {_to_str(v): v for v in iterable}
    axes = {k: (interpolate(v, context) if isinstance(v, str) else v) for k, v in definition["matrix"].items()}
    members: dict[str, Any] = {}
    for combination in product(*(list(enumerate(v)) for v in axes.values())):
        key = "-".join(
            f"{axis}{i}" if isinstance(v, Mapping | list) else _to_str(v)
            for axis, (i, v) in zip(axes, combination)
        )
        members[key] = {axis: v for axis, (_, v) in zip(axes, combination)}
    return members


def declared_deps(root: Path, stage: str) -> list[str]:
    """The `deps` dvc.yaml declares for `stage` (`name` or `name@key`), resolved; [] where dvc.yaml or the
    stage is not there. References it cannot resolve leave their path out."""
    return Declarations.load(root).deps(stage)


class Declarations:
    """dvc.yaml's stage definitions with the context of their `${...}`, read once (a stage reads it once;
    a check of every stage would otherwise parse params.yaml and runs.yaml per stage)."""

    def __init__(self, stages: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        self.stages, self.context = stages, context

    @classmethod
    def load(cls, root: Path) -> Declarations:
        path = root / "dvc.yaml"
        if not path.is_file():
            return cls({}, {})
        dvc_yaml = load_safe(path)
        stages = dvc_yaml.get("stages") if isinstance(dvc_yaml, Mapping) else None
        if not isinstance(stages, Mapping):
            return cls({}, {})
        return cls(stages, _context(root, dvc_yaml))

    def deps(self, stage: str) -> list[str]:
        """`declared_deps` of one stage."""
        name, at, key = stage.partition("@")
        definition = self.stages.get(name)
        if not isinstance(definition, Mapping):
            return []
        local: Mapping[str, Any] = self.context
        if at:
            if "foreach" not in definition and "matrix" not in definition:
                return []
            members = _items(definition, self.context)
            if key not in members:
                return []
            local = {**self.context, "key": key, "item": members[key]}
            definition = definition.get("do", definition)
        wdir = str(definition.get("wdir", "."))
        found = []
        for dep in definition.get("deps") or []:
            if not isinstance(dep, str):
                continue
            try:
                value = interpolate(dep, local)
            except Unresolved:
                continue
            found.append(normalise(f"{wdir}/{_to_str(value)}"))
        return found


def locked_deps(lock: Mapping[str, Any], stage: str) -> list[str]:
    """The dependency paths dvc.lock recorded for `stage` when it last ran ([] if it has not)."""
    entry = (lock.get("stages") or {}).get(stage) or {}
    return [normalise(str(d["path"])) for d in entry.get("deps") or [] if isinstance(d, Mapping) and "path" in d]


def normalise(path: str) -> str:
    """A project-relative path in the form dvc.lock writes it ('/'-separated, no `./`, no trailing '/')."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)
