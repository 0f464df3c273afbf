"""The strict converter behind multitab.config: a YAML mapping -> frozen dataclasses.

`build(cls, mapping, where)` rejects unknown and missing keys and wrong types and names the key path
(`params.yaml: train.patinece: unknown key; known: [...]`), so a misspelt key fails at load time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A params file does not match the typed configuration."""


def overlay(cls: type, value: Any, where: str) -> dict[str, Any]:
    """Some keys of dataclass `cls` (a profile's overlay, e.g. `bench.train` over `train`), each converted
    to its field's type; unknown keys fail like in `build`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    hints = typing.get_type_hints(cls)
    fields = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    out = {}
    for key, v in value.items():
        if key not in fields:
            raise ConfigError(f"{_join(where, key)}: unknown key; known: {fields}")
        out[key] = _convert(hints[key], v, _join(where, key))
    return out


def _join(where: str, key: str) -> str:
    """`params.yaml: train` + `patience` -> `params.yaml: train.patience`."""
    return f"{where}.{key}" if not where.endswith(":") else f"{where} {key}"


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
            raise ConfigError(f"{_join(where, unknown[0])}: unknown key; known: {sorted(fields)}")
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
