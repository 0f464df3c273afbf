"""Typed, strict access to params.yaml.

params.yaml is read here and nowhere else. Each subsystem declares frozen dataclasses for its own section
and builds them with `build(cls, mapping, where)`, which rejects unknown and missing keys and names the
offending key path, so a misspelt `learning_rat` fails at load time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A params file does not match the typed configuration."""


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read a params file as a mapping; errors name the file."""
    path = Path(path)
    try:
        with path.open() as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found (run from the repository root)") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def section(params: dict[str, Any], dotted: str, cls: type[T], *, source: str = "params.yaml") -> T:
    """Build dataclass `cls` from the sub-mapping at `dotted` (e.g. "datasets.higgs")."""
    node: Any = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{source}: missing key '{dotted}' (no '{part}')")
        node = node[part]
    return build(cls, node, where=f"{source}:{dotted}")


def build(cls: type[T], value: Any, where: str) -> T:
    """Recursively convert `value` into `cls` (a dataclass or a typing annotation), strictly."""
    return typing.cast(T, _convert(cls, value, where))


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(fields)}")
        kwargs = {}
        for name, field in fields.items():
            if name in value:
                kwargs[name] = _convert(hints[name], value[name], f"{where}.{name}")
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: missing key '{name}'")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}: {value!r} matches none of {tp}: {'; '.join(errors)}")
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (list, tuple):
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        return tuple(_convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        k_tp, v_tp = typing.get_args(tp) or (Any, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {_convert(k_tp, k, where): _convert(v_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp!r} in config schema")
