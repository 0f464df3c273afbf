"""The typed root config: params.yaml read once, strictly, into one frozen object.

    params = load_params("params.yaml")          # every stage, flow and benchmark starts here
    params.train.batch_size, params.datasets["higgs"].split, params.validation.raw.range_margin, ...

One dataclass per section (`datasets`, `validation`, `bench`, `study`, `train`, `runs`, `complexity`,
`aggregate`, `orchestration`; the top-level `protocol`; `models`, a user's own models, which loading enters into
the model registry: multitab.config.models), in this package's modules. Unknown keys, missing
keys and wrong types fail at load with the file and the key path (`params.yaml: train.patinece: unknown
key; known: [...]`). A section a project leaves out (the tests' small DVC projects hold only
`orchestration`) fails only when it is asked for. Run profiles (`bench`, `study`) are a function of this
object: multitab.runs.profiles.profiled; the run matrix (`runs`) expands in multitab.runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from multitab.config._build import ConfigError, build, default_source, overlay
from multitab.config.aggregate import AggregateConfig
from multitab.config.bench import AttributionConfig, BenchConfig, BenchDataConfig, StudyConfig
from multitab.config.data import DatasetConfig
from multitab.config.icl import IclConfig
from multitab.config.models import ModelDeclaration, build_models, entries
from multitab.config.names import check_dataset_names, check_names
from multitab.config.orchestration import OrchestrationConfig
from multitab.config.runs import RunGroup
from multitab.config.train import TrainConfig
from multitab.config.validation import ValidationConfig
from multitab.files.yaml_data import load_yaml, short_repr, yaml_error_line
from multitab.protocol import DEFAULT, PROTOCOLS, Protocol
from multitab.registry import declare

T = TypeVar("T")


@dataclass(frozen=True)
class ComplexityConfig:
    batch_size: int  # samples per counted forward pass (Table 4: 1); matters for inter-sample attention


_SECTIONS: dict[str, type] = {
    "datasets": dict[str, DatasetConfig],
    "validation": ValidationConfig,
    "bench": BenchConfig,
    "study": StudyConfig,
    "attribution": AttributionConfig,
    "train": TrainConfig,
    "runs": dict[str, RunGroup],
    "complexity": ComplexityConfig,
    "aggregate": AggregateConfig,
    "orchestration": OrchestrationConfig,
    "icl": IclConfig,
}


@dataclass(frozen=True)
class Params:
    """params.yaml. `source` names the file (and the profile) in errors."""

    source: str
    protocol: Protocol = DEFAULT
    sections: dict[str, Any] = field(default_factory=dict, repr=False)

    def _get(self, name: str, cls: type[T]) -> T:
        if name not in self.sections:
            raise ConfigError(f"{self.source}: no `{name}:` section")
        return self.sections[name]  # type: ignore[no-any-return]

    @property
    def datasets(self) -> dict[str, DatasetConfig]:
        """`datasets.<name>`, each with the split in effect under `protocol`."""
        return self._get("datasets", dict)

    def dataset(self, name: str) -> DatasetConfig:
        """`datasets.<name>`; an unknown name fails naming the file and the known ones."""
        datasets = self.datasets
        if name not in datasets:
            raise ConfigError(f"{self.source}: missing key 'datasets.{name}'; known: {sorted(datasets)}")
        return datasets[name]

    @property
    def validation(self) -> ValidationConfig:
        return self._get("validation", ValidationConfig)

    @property
    def bench(self) -> BenchConfig:
        return self._get("bench", BenchConfig)

    @property
    def study(self) -> StudyConfig:
        return self._get("study", StudyConfig)

    @property
    def attribution(self) -> AttributionConfig:
        return self._get("attribution", AttributionConfig)

    @property
    def runs(self) -> dict[str, RunGroup]:
        """`runs.<group>`: the run matrix (multitab.config.runs; expanded by multitab.runs)."""
        return self._get("runs", dict)

    def group(self, name: str) -> RunGroup:
        """`runs.<name>`; an unknown name fails naming the file and the known groups."""
        runs = self.runs
        if name not in runs:
            raise ConfigError(f"{self.source}: no run group `runs.{name}`; known: {sorted(runs)}")
        return runs[name]

    @property
    def train(self) -> TrainConfig:
        """`train`, with the top-level `protocol` in `train.protocol`."""
        return self._get("train", TrainConfig)

    @property
    def complexity(self) -> ComplexityConfig:
        return self._get("complexity", ComplexityConfig)

    @property
    def aggregate(self) -> AggregateConfig:
        return self._get("aggregate", AggregateConfig)

    @property
    def orchestration(self) -> OrchestrationConfig:
        return self._get("orchestration", OrchestrationConfig)

    @property
    def icl(self) -> IclConfig:
        """`icl`: the pretrained in-context baselines (multitab.config.icl)."""
        return self._get("icl", IclConfig)

    @property
    def models(self) -> dict[str, ModelDeclaration]:
        """`models.<name>`: the user's own models (multitab.config.models); none when the section is left out."""
        return self.sections.get("models", {})  # type: ignore[no-any-return]

    def replace(self, **sections: Any) -> Params:
        """A copy with some sections replaced (multitab.runs.profiles)."""
        return dataclasses.replace(self, sections={**self.sections, **sections})


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from disk (plain data: nothing in it can run code; a key given twice is an error);
    errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found (run from the repository root)") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """`read_yaml` of text already read (e.g. a committed version of params.yaml); `source` names it in
    errors."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(yaml_error_line(source, e)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_params(path: str | Path = "params.yaml") -> Params:
    """params.yaml as the typed root config (see the module docstring)."""
    return parse_params(read_yaml(path), str(path))


def parse_params(raw: dict[str, Any], source: str = "params.yaml") -> Params:
    """The typed root config of an already read params mapping."""
    known = ["protocol", "models", *_SECTIONS]
    for key in raw:
        if key not in known:
            raise ConfigError(f"{source}: {key}: unknown key; known: {known}")
    protocol = raw.get("protocol", DEFAULT)
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{source}: protocol={short_repr(protocol)} must be one of {list(PROTOCOLS)} "
                          "(see docs/deviations.md)")
    if "protocol" in (raw.get("train") or {}):
        raise ConfigError(f"{source}: `protocol` is a top-level key, not train.protocol")
    if isinstance(raw.get("datasets"), dict):
        check_dataset_names([n for n, e in raw["datasets"].items() if not (isinstance(e, dict) and "tasks" in e)],
                            source)
    sections: dict[str, Any] = {}
    if "models" in raw:  # first: the run groups' checks know the user's models (a sweep group may name one)
        sections["models"] = build_models(raw["models"], source)
    declare(entries(sections.get("models", {}), source))  # in place of the models an earlier params file declared
    for name, cls in _SECTIONS.items():
        if name in raw:
            try:
                sections[name] = build(cls, raw[name], where=f"{source}: {name}")
            except ConfigError as e:  # checks in __post_init__ name the key path but not the file
                msg = str(e)
                raise ConfigError(msg if msg.startswith(source) else f"{source}: {msg}") from None
    if "datasets" in sections:
        sections["datasets"] = {
            name: dataclasses.replace(cfg, split=cfg.split.for_protocol(protocol))
            for name, cfg in sections["datasets"].items()
        }
    if "train" in sections:
        sections["train"] = dataclasses.replace(sections["train"], protocol=protocol)
    if "runs" in sections:
        sections["runs"] = {
            name: dataclasses.replace(group, train=overlay(TrainConfig, raw["runs"][name].get("train"),
                                                          f"{source}: runs.{name}.train"))
            for name, group in sections["runs"].items()
        }
    if "study" in sections:
        study = sections["study"]
        sections["study"] = dataclasses.replace(
            study, data=overlay(BenchDataConfig, raw["study"].get("data"), f"{source}: study.data"))
        configs = sections["bench"].configs if "bench" in sections else {}
        unknown = [c for c in study.configs if c not in configs]
        if unknown:
            raise ConfigError(f"{source}: study.configs: {unknown} are not keys of bench.configs ({sorted(configs)})")
    if "attribution" in sections:
        attribution = sections["attribution"]
        sections["attribution"] = dataclasses.replace(
            attribution, data=overlay(BenchDataConfig, raw["attribution"].get("data"), f"{source}: attribution.data"))
        configs = sections["bench"].configs if "bench" in sections else {}
        unknown = [c for c in attribution.configs if c not in configs]
        if unknown:
            raise ConfigError(f"{source}: attribution.configs: {unknown} are not keys of bench.configs "
                              f"({sorted(configs)})")
    if "aggregate" in sections and not sections["aggregate"].datasets:
        sections["aggregate"] = dataclasses.replace(sections["aggregate"], datasets=tuple(sections.get("datasets", ())))
    check_names(sections, source)
    return Params(source=source, protocol=protocol, sections=sections)


__all__ = ["ConfigError", "Params", "build", "default_source", "load_params", "parse_params", "read_yaml"]
