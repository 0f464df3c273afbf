"""params.yaml `icl`: the pretrained in-context baselines (Orion-MSP, TabICL; multitab.icl, docs/icl.md).

Opt-in: a model without a checkpoint (`checkpoints.<model>.path: null`) is not run, and every record and
report says "not run: no checkpoint". Random weights are never a result of these models."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from multitab.config._build import ValueProblem, bounded

ICL_MODELS = ("orion_msp", "tabicl")
CHECKPOINT_NAMES = (*ICL_MODELS, "tabicl_regressor")  # TabICL's regression tasks need its regressor's file


@dataclass(frozen=True)
class IclCheckpoint:
    path: str | None  # a local file (relative to the project root); null: the model is not run
    sha256: str | None  # the file's pinned sha256; required with `path` (a wrong file is refused)
    hub_repo: str | None = None  # where `python -m multitab.icl.fetch` gets it (model hub repository)...
    hub_file: str | None = None  # ... and file name

    def __post_init__(self) -> None:
        if self.path is not None and (self.sha256 is None or len(self.sha256) != 64):
            raise ValueProblem(f"path={self.path!r} needs its pinned `sha256` (64 hex digits)")


@dataclass(frozen=True)
class OrionSwitches:
    window: Literal["reference", "paper"]  # docs/deviations.md D20
    memory: Literal["reference", "split"]  # D21
    links: Literal["reference", "seeded"]  # D22
    link_seed: int


@dataclass(frozen=True)
class IclConfig:
    models: tuple[str, ...]  # which of ICL_MODELS the `icl` stage evaluates
    datasets: tuple[str, ...]  # keys of `datasets:`
    seeds: tuple[int, ...]
    context_size: int = field(metadata=bounded(ge=1))  # training rows used as context, at most
    context_rule: Literal["uniform"]  # which: a uniform seeded sample without replacement (multitab.icl.context)
    chunk_size: int = field(metadata=bounded(ge=1))  # test rows per call, in a seeded order (D23)
    n_estimators: int = field(metadata=bounded(ge=1))  # ensemble views per prediction
    device: str  # cpu | cuda
    checkpoints: dict[str, IclCheckpoint]
    orion: OrionSwitches
    out: str  # results folder: <out>/<dataset>/<model>/seed<k>/metrics.json and <out>/summary.md

    def __post_init__(self) -> None:
        unknown = sorted(set(self.models) - set(ICL_MODELS)) + sorted(set(self.checkpoints) - set(CHECKPOINT_NAMES))
        if unknown:
            raise ValueProblem(f"models / checkpoints: {unknown} unknown; known: {list(CHECKPOINT_NAMES)}")
        missing = sorted(set(self.models) - set(self.checkpoints))
        if missing:
            raise ValueProblem(f"checkpoints: no entry for {missing} (give `path: null` to leave one off)")
