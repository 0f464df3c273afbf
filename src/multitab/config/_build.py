"""The strict converter behind multitab.config: a YAML mapping -> frozen dataclasses.

`build(cls, mapping, where)` rejects unknown and missing keys and wrong types and names the key path
(`params.yaml: train.patinece: unknown key; known: [...]`), so a misspelt key fails at load time. A params file
writes every setting: a field with a default is required too, unless it is declared `optional(...)` with what its
absence means (an override that keeps what it overrides, a declared dataset's keys the registry's need); so no
value reaches a run from a default hidden in code. A field
declared with `metadata=bounded(...)` is range-checked there too (`params.yaml: preprocess.noise=-1: must be >= 0`),
each item of a list field, and a list declared `unique` rejects repeated items.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from multitab.files.yaml_data import short_repr

T = TypeVar("T")


class ConfigError(ValueError):
    """A params file does not match the typed configuration."""


class ValueProblem(ConfigError):
    """Raised by a config dataclass's own checks (`__post_init__`) in words relative to it; `build`
    prefixes the key path of the mapping it was read from (`params.yaml: datasets.higgs.split: ...`)."""


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The allowed range of a number (or of each item of a list of numbers); None: unbounded."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    unique: bool = False  # a list: no item twice

    def problem(self, value: Any) -> str | None:
        """Why `value` is out of range, or None."""
        if value is None:
            return None
        if isinstance(value, tuple | list):
            if self.unique and len(set(value)) != len(value):
                seen: set[Any] = set()
                twice = [v for v in value if v in seen or seen.add(v)]  # type: ignore[func-returns-value]
                return f"lists {short_repr(twice[0])} more than once"
            return next((p for p in map(self.problem, value) if p), None)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        for bound, ok, word in (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not ok(bound):
                return f"must be {word} {bound:g}" if isinstance(bound, float) else f"must be {word} {bound}"
        return None


def bounded(
    *, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
    unique: bool = False,
) -> dict[str, Bounds]:
    """The metadata of a dataclass field whose value `build` range-checks at load, naming the key:
    `noise: float = field(default=1e-3, metadata=bounded(ge=0.0))`."""
    return {"bounds": Bounds(ge=ge, gt=gt, le=le, lt=lt, unique=unique)}


def optional(meaning: str, *, when: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The metadata of a field params.yaml may leave out, and what its absence means (`meaning`, e.g. "the same
    split under both protocols"); `when`: only where it holds of the mapping the field is read from (e.g. a
    declared dataset). Every other field with a default is still required in a params file: its default serves
    code that builds a config directly (tests, the estimator), never a missing key."""
    return {"optional": meaning, "optional_when": when}


def default_source(cls: type, name: str) -> str:
    """`default (src/multitab/config/runs.py:71)`: where field `name` of dataclass `cls` gives its default."""
    lines, first = inspect.getsourcelines(cls)
    at = next((first + i for i, line in enumerate(lines) if line.lstrip().startswith(f"{name}:")), first)
    path = Path(inspect.getfile(cls))
    shown = path.relative_to(path.parents[3]) if len(path.parents) > 3 else path  # src/multitab/config/x.py
    return f"default ({shown}:{at})"


def default_text(field: dataclasses.Field[Any]) -> str:
    """A field's default as params.yaml would spell it, for the error that asks for the key."""
    value = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def overlay(cls: type, value: Any, where: str) -> dict[str, Any]:
    """Some keys of dataclass `cls` (an overlay, e.g. a run group's `train` over `train`), each converted
    to its field's type; unknown keys fail like in `build`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {short_repr(value)}")
    hints = typing.get_type_hints(cls)
    fields = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    out = {}
    bounds = {f.name: f.metadata.get("bounds") for f in dataclasses.fields(cls)}
    for key, v in value.items():
        if key not in fields:
            raise ConfigError(f"{_join(where, key)}: unknown key; known: {fields}")
        out[key] = _convert(hints[key], v, _join(where, key))
        _check(bounds[key], out[key], _join(where, key))
    return out


def _may_be_absent(field: dataclasses.Field[Any], mapping: dict[str, Any]) -> bool:
    if "optional" not in field.metadata:
        return False
    when = field.metadata.get("optional_when")
    return when is None or bool(when(mapping))


def _check(bounds: Bounds | None, value: Any, where: str) -> None:
    problem = bounds.problem(value) if bounds is not None else None
    if problem:
        value_ = list(value) if isinstance(value, tuple) else value
        raise ConfigError(f"{where}={short_repr(value_)}: {problem}")


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
            raise ConfigError(f"{where}: expected a mapping, got {short_repr(value)}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ConfigError(f"{_join(where, unknown[0])}: unknown key; known: {sorted(fields)}")
        kwargs = {}
        for name, field in fields.items():
            if name in value:
                kwargs[name] = _convert(hints[name], value[name], f"{where}.{name}")
                _check(field.metadata.get("bounds"), kwargs[name], f"{where}.{name}")
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{where}: missing key '{name}'")
            elif not _may_be_absent(field, value):
                raise ConfigError(f"{where}: missing key '{name}': every setting is written in the params file "
                                  f"(the value the code suggests: {name}: {default_text(field)})")
        try:
            return tp(**kwargs)
        except ValueProblem as e:
            raise ConfigError(f"{where}: {e}") from None
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
        raise ConfigError(f"{where}: {short_repr(value)} matches none of {tp}: {'; '.join(errors)}")
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {short_repr(value)} is not one of {list(allowed)}")
        return value
    if origin in (list, tuple):
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {short_repr(value)}")
        item_tp = args[0] if args else Any
        return tuple(_convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        k_tp, v_tp = typing.get_args(tp) or (Any, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {short_repr(value)}")
        return {_convert(k_tp, k, where): _convert(v_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {short_repr(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {short_repr(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {short_repr(value)}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {short_repr(value)}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp!r} in config schema")
