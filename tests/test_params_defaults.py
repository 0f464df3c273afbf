"""No hidden default: params.yaml writes every setting. Removing any key of its sections' typed fields fails at
load, naming the key and the value the code suggests, except the fields declared optional, whose absence has a
stated meaning (an override that keeps what it overrides, a declared dataset's keys that only the registry's
datasets have). A setting a run trains with is then always the params file's, and `runs show` says so truly."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from multitab.config import _SECTIONS, ConfigError, parse_params, read_yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = read_yaml(ROOT / "params.yaml")


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass a field's annotation holds directly or as `X | None`."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return found[0] if found else None
    return None


def keys(tp: Any, raw: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], bool]]:
    """(key path, may it be left out) of every typed field params.yaml writes, walked with its annotation."""
    cls = _dataclass_of(tp)
    if cls is not None and isinstance(raw, dict):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init and f.name in raw:
                when = f.metadata.get("optional_when")
                may = "optional" in f.metadata and (when is None or when(raw))
                yield (*path, f.name), may
                yield from keys(hints[f.name], raw[f.name], (*path, f.name))
    elif typing.get_origin(tp) is dict and isinstance(raw, dict):
        value_tp = typing.get_args(tp)[1]
        for name, value in raw.items():
            yield from keys(value_tp, value, (*path, name))


ALL = [(path, may) for section, tp in _SECTIONS.items() if section in BASE for path, may in keys(tp, BASE[section],
                                                                                                  (section,))]
REQUIRED = [path for path, may in ALL if not may]


def _without(path: tuple[Any, ...]) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    node = raw
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    return raw


def test_every_setting_of_params_yaml_is_walked() -> None:
    assert len(REQUIRED) > 150, len(REQUIRED)
    walked = {".".join(map(str, p)) for p in REQUIRED}
    for key in ("train.cuda_graph", "train.stack_seeds", "train.eval_batch_size", "validation.default_policy.rows",
                "runs.bench.opt_in", "datasets.higgs.preprocess.noise", "datasets.higgs.remote.retries"):
        assert key in walked, key


@pytest.mark.parametrize("path", REQUIRED, ids=lambda p: ".".join(map(str, p)))
def test_removing_a_setting_fails_naming_it(path: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError) as e:
        parse_params(_without(path))
    where = ".".join(map(str, path[:-1]))
    assert f"{where}: missing key '{path[-1]}'" in str(e.value)


def test_the_message_gives_the_value_to_write() -> None:
    with pytest.raises(ConfigError, match=r"train: missing key 'cuda_graph': .*\(the value the code suggests: "
                                          r"cuda_graph: false\)"):
        parse_params(_without(("train", "cuda_graph")))


def test_an_optional_key_means_what_it_says() -> None:
    """The optional keys params.yaml writes are few, each with its meaning; leaving one out keeps the load
    working (e.g. an authors_code split override: the same split under both protocols)."""
    optional = {".".join(map(str, p)) for p, may in ALL if may}
    assert optional <= {"datasets.higgs.split.authors_code", "datasets.acs_income.split.authors_code",
                        "datasets.aliexpress.split.authors_code"} | {
        k for k in optional if ".split.authors_code." in k or k.startswith("train.optim.")}, optional
    parse_params(_without(("datasets", "higgs", "split", "authors_code")))
