"""No hidden default: params.yaml writes every setting. Removing any key of its sections' typed fields fails at
load, naming the key and the value the code suggests, except the fields declared optional, whose absence has a
stated meaning (an override that keeps what it overrides, a declared dataset's keys that only the registry's
datasets have). A setting a run trains with is then always the params file's, and `runs show` says so truly."""

from __future__ import annotations

import copy
import dataclasses
import shutil
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from multitab.config import _SECTIONS, ConfigError, parse_params, read_yaml
from multitab.runs.cli import show

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
                "runs.bench.train", "datasets.higgs.preprocess.noise", "datasets.higgs.remote.retries"):
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
    """The optional keys params.yaml writes are few, each with its meaning: an override that keeps what it overrides
    (leaving it out keeps the load working), or a run group's key whose default `runs show` prints (below)."""
    optional = {".".join(map(str, p)) for p, may in ALL if may}
    overrides = {k for k in optional if ".split.authors_code" in k or k.startswith("train.optim.")}
    shown = {k for k in optional if k.startswith("runs.") and k.rsplit(".", 1)[1] in ("opt_in", "out", "checkpoints")}
    sweeps = {k for k in optional if k.startswith("runs.") and k.rsplit(".", 1)[1] in ("sweep", "grid")}
    assert overrides and shown and sweeps and optional == overrides | shown | sweeps, optional - overrides - shown
    parse_params(_without(("datasets", "higgs", "split", "authors_code")))
    for key in sweeps:  # a sweep group's family and grid go together: one left out fails naming both
        with pytest.raises(ConfigError, match=f"{key.rsplit('.', 1)[0]}: sweep and grid go together"):
            parse_params(_without(tuple(key.split("."))))


@pytest.mark.parametrize("key", ["opt_in", "out", "checkpoints"])
def test_runs_show_names_a_default_with_its_line(tmp_path: Path, key: str) -> None:
    """A run group's key left out: `runs show` says the value is the default and where the code gives it."""
    shutil.copytree(ROOT / "hparams", tmp_path / "hparams")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_without(("runs", "real", key)), sort_keys=False))
    shown = show(params, "real-higgs-mmoe-0", tmp_path / "runs.yaml")
    line = next(line for line in shown.splitlines() if line.lstrip().startswith(f"group.{key} "))
    where = line.rsplit("default (", 1)[1].rstrip(")")
    path, number = where.rsplit(":", 1)
    assert (ROOT / path).read_text().splitlines()[int(number) - 1].lstrip().startswith(f"{key}:"), line
    kept = show(ROOT / "params.yaml", "real-higgs-mmoe-0", tmp_path / "runs.yaml")
    assert f"params.yaml: runs.real.{key}" in kept
