"""params.yaml `icl`: the pretrained in-context baselines (Orion-MSP, TabICL; multitab.icl, docs/icl.md).

Opt-in: a model runs once `python -m multitab.icl.fetch` has fetched and verified its checkpoint files into
icl.lock (multitab.icl.lock); without them every record and report says "not run: no checkpoint". Random
weights are never a result of these models."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from multitab.config._build import ValueProblem, bounded

ICL_MODELS = ("orion_msp", "tabicl")
CHECKPOINT_NAMES = (*ICL_MODELS, "tabicl_regressor")  # TabICL's regression tasks need its regressor's file
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class IclCheckpoint:
    hub_repo: str  # where `python -m multitab.icl.fetch` gets it (model hub repository)...
    hub_file: str  # ... the file ...
    revision: str | None  # ... at this hub commit (null: the hub's default branch; the lock records the commit)
    sha256: str | None  # the file's sha256 where a public source states it (null: the first verified fetch pins it)

    def __post_init__(self) -> None:
        if self.sha256 is not None and not _HEX64.fullmatch(self.sha256):
            raise ValueProblem(f"sha256={self.sha256!r} must be 64 hex digits (or null)")


@dataclass(frozen=True)
class IclProfile:
    """How much of the released settings a run affords (docs/icl.md, "Profiles")."""

    context_size: int | None = field(metadata=bounded(ge=1))  # training rows as context, at most; null: all (D25)
    chunk_size: int | None = field(metadata=bounded(ge=1))  # test rows per call (D23); null: a split in one call
    eval_rows: int | None = field(metadata=bounded(ge=1))  # val / test rows scored per split, at most (D27); null: all
    n_estimators: dict[str, int]  # ensemble views per model (D26)

    def __post_init__(self) -> None:
        wrong = sorted(k for k, v in self.n_estimators.items()
                       if k not in ICL_MODELS or isinstance(v, bool) or not isinstance(v, int) or v < 1)
        missing = sorted(set(ICL_MODELS) - set(self.n_estimators))
        if wrong or missing:
            raise ValueProblem(f"n_estimators: needs a count >= 1 for each of {list(ICL_MODELS)} "
                               f"(wrong: {wrong}, missing: {missing})")


@dataclass(frozen=True)
class OrionSwitches:
    window: Literal["reference", "paper"]  # docs/deviations.md D20
    memory: Literal["reference", "split"]  # D21
    links: Literal["reference", "seeded"]  # D22
    link_seed: int


@dataclass(frozen=True)
class IclConfig:
    models: tuple[str, ...]  # which of ICL_MODELS the `icl` stage evaluates
    datasets: tuple[str, ...]  # keys of `datasets:` or of `bench.configs` (MultiTab-Bench)
    seeds: tuple[int, ...]
    context_rule: Literal["uniform"]  # which: a uniform seeded sample without replacement (multitab.icl.context)
    device: Literal["auto", "cpu", "cuda"]  # auto: CUDA when torch sees one
    profile: Literal["auto", "cpu", "gpu"]  # auto: `gpu` on CUDA, `cpu` otherwise
    profiles: dict[str, IclProfile]  # cpu, gpu
    checkpoints: dict[str, IclCheckpoint]
    orion: OrionSwitches
    out: str  # results folder: <out>/<dataset>/<model>/seed<k>/metrics.json and <out>/summary.md

    def __post_init__(self) -> None:
        unknown = sorted(set(self.models) - set(ICL_MODELS)) + sorted(set(self.checkpoints) - set(CHECKPOINT_NAMES))
        if unknown:
            raise ValueProblem(f"models / checkpoints: {unknown} unknown; known: {list(CHECKPOINT_NAMES)}")
        missing = sorted(set(self.models) - set(self.checkpoints))
        if missing:
            raise ValueProblem(f"checkpoints: no entry for {missing}")
        if sorted(self.profiles) != ["cpu", "gpu"]:
            raise ValueProblem(f"profiles: {sorted(self.profiles)}; give exactly `cpu` and `gpu`")

    def settings(self, device: str) -> tuple[str, IclProfile]:
        """The profile a run on `device` ("cpu" or "cuda") uses, and its name."""
        name = self.profile if self.profile != "auto" else ("gpu" if device == "cuda" else "cpu")
        return name, self.profiles[name]
