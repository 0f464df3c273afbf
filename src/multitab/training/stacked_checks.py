"""What can train as a stack (stacked.py), checked before anything trains or is written.

    check_training(run, model)           # the stage's early check, from the run record alone
    check_stackable(members, settings)   # the built members: StackRefused or ValueError naming why

`StackRefused` is the refusal the caller may answer by training the runs one after another (dropout > 0,
bf16, compile, a model with its own objective or that trains itself); any other ValueError is an error in
the request (members that differ in more than their seed, a shared checkpoint folder).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from multitab.datasets.schema import DatasetSchema
from multitab.models import model_class
from multitab.runs.record import RunConfig
from multitab.training.device import resolve_device
from multitab.training.settings import RunSettings
from multitab.training.stacked_data import schema_shape
from multitab.training.stacked_step import reference_type

if TYPE_CHECKING:
    from multitab.training.data import ProcessedData

__all__ = ["DATA_SETTINGS", "StackMember", "StackRefused", "check_hparams", "check_stackable", "check_training"]

# the run settings (training/run.py resume_settings) that name a run's data: members on other data differ there
DATA_SETTINGS = ("dataset", "meta", "data")

_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass
class StackMember:
    """One run of the stack: its seed, its model (built right after `seed_everything(seed)`: `seeded`), its
    checkpoint folder and fingerprint (those of the separate run), and the global RNG states right after
    the build (None: taken when training starts, right only for the member built last)."""

    seed: int
    model: nn.Module
    checkpoint_dir: Path
    run_fingerprint: str
    run_settings: dict[str, Any] | None = None
    rng: dict[str, Any] | None = None


class StackRefused(ValueError):
    """The model or the training settings cannot train as a stack equal to the separate runs (dropout > 0,
    bf16, compile, a model that trains itself or has its own objective). Raised before anything trains or
    is written, so the caller may train the runs one after another instead. Any other ValueError of stacked
    training is an error in the request (members that differ in more than the seed, ...)."""


def check_hparams(model_hparams: Mapping[str, Any], where: str = "hyperparameters") -> None:
    """StackRefused when a model hyperparameter whose name contains "dropout" is neither 0 nor None."""
    bad = {k: v for k, v in model_hparams.items() if "dropout" in k.lower() and v not in (None, 0, 0.0)}
    if bad:
        raise StackRefused(f"{where}: stacked training needs every dropout 0, got {bad}: the separate runs draw "
                         "their dropout masks from one global generator each, which a stacked step cannot replay")


def _dropouts(model: nn.Module) -> list[str]:
    found = []
    for name, module in model.named_modules():
        if isinstance(module, _DROPOUT_MODULES) and module.p > 0:
            found.append(f"{name or 'model'} ({type(module).__name__}, p={module.p})")
        for key, value in vars(module).items():
            if ("dropout" in key.lower() and isinstance(value, int | float) and not isinstance(value, bool)
                    and value > 0):
                found.append(f"{name or 'model'}.{key}={value}")
    return found


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str | tuple | list) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type))


def _structure(model: nn.Module) -> list[tuple[Any, ...]]:
    """What two models of the same constructor call share: every module's class and plain settings, every
    parameter's and buffer's name, shape, dtype (and whether it trains)."""
    out: list[tuple[Any, ...]] = []
    for name, module in model.named_modules():
        # a schema by its shape: members on other data of one shape differ in its name and statistics
        settings = sorted((k, repr(schema_shape(v) if isinstance(v, DatasetSchema) else v))
                          for k, v in vars(module).items()
                          if not k.startswith("_") and k != "training" and _plain(v))
        out.append(("module", name, reference_type(module).__qualname__, settings))
    out += [("parameter", n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in model.named_parameters()]
    out += [("buffer", n, tuple(b.shape), b.dtype) for n, b in model.named_buffers()]
    return out


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


# Why a stack is fp32 only. bf16 autocast takes other kernels. TF32 rounds every matrix product's inputs to
# a 10-bit mantissa: the vmapped step's fp32 differences from the separate run (another summation order, one
# ulp) move a value across a TF32 rounding boundary now and then, a step 2^13 times larger, so the members
# would no longer equal their separate runs up to fp32 rounding. Refused on CPU too, where tf32 is fp32, so
# that the same runs.yaml stacks or not whatever machine trains it.
_NOT_FP32 = ("bf16 autocast, and TF32 rounding its inputs to a 10-bit mantissa (which magnifies the stacked step's "
             "one-ulp differences),")


def check_training(run: RunConfig, model: str) -> None:
    """StackRefused naming why, when runs of `model` (a run model name, variants included) under `run` (their
    record) cannot stack; checked before any data is read or model built."""
    config, hparams = run.train, run.hparams
    cls = model_class(model.partition("@")[0])
    if not issubclass(cls, nn.Module):
        raise StackRefused(f"{cls.__name__} is not a torch module (it trains itself); only "
                           "gradient-trained torch models stack")
    hooks = [h for h in ("training_loss", "fit_context") if callable(getattr(cls, h, None))]
    if hooks:
        raise StackRefused(f"{cls.__name__} has the hook(s) {hooks} (its own objective or a context fitted on "
                           "the training split), which a stacked step cannot batch")
    if config.precision != "fp32" or config.compile:
        raise StackRefused(f"precision {config.precision}, compile {config.compile}: stacked training is fp32 "
                           f"and eager only ({_NOT_FP32} and compiled kernels differ from the separate runs')")
    check_hparams(hparams.model, hparams.file or "hyperparameters")


def check_stackable(members: Sequence[StackMember], settings: RunSettings,
                    datas: Sequence[ProcessedData] | None = None) -> None:
    """StackRefused naming why, when the members' models or settings cannot stack; ValueError when the
    members differ in more than the seed and, where `datas` (one per member) gives them other data, the
    settings that name their data (`DATA_SETTINGS`; stacked_data.check_same_shape checks the data)."""
    if not members:
        raise ValueError("stacked training needs at least one member")
    if settings.precision != "fp32":
        raise StackRefused(f"stacked training runs in fp32 only (precision {settings.precision!r}): {_NOT_FP32} "
                           "differ from the separate runs'")
    device = resolve_device(settings.device)
    if settings.compile and device.type == "cuda":
        raise StackRefused("stacked training does not compile (train.compile): the separate runs' compiled kernels "
                         "differ from the vmapped step's")
    first = members[0]
    for m in members:
        who = f"member seed {m.seed}"
        if not isinstance(m.model, nn.Module):
            raise StackRefused(f"{who}: a {type(m.model).__name__} is not a torch module (it trains itself); "
                             "only gradient-trained torch models stack")
        hooks = [h for h in ("training_loss", "fit_context") if callable(getattr(m.model, h, None))]
        if hooks:
            raise StackRefused(f"{who}: {type(m.model).__name__} has the hook(s) {hooks} (its own objective or a "
                             "context fitted on the training split), which a stacked step cannot batch")
        dropouts = _dropouts(m.model)
        if dropouts:
            raise StackRefused(f"{who}: dropout > 0 in {dropouts}; stacked training needs every dropout 0 (the "
                             "separate runs draw their masks from one global generator each)")
        if m.run_settings is not None:
            check_hparams(((m.run_settings.get("hparams") or {}).get("model") or {}), f"{who}: hparams")
    dirs = [Path(m.checkpoint_dir).resolve() for m in members]
    if len(set(dirs)) != len(dirs):
        raise ValueError(f"members share a checkpoint folder: {[str(d) for d in dirs]}")
    reference = _structure(first.model)
    for i, m in enumerate(members[1:], start=1):
        if type(m.model) is not type(first.model) and reference_type(m.model) is not reference_type(first.model):
            raise ValueError(f"members differ in more than the seed: seed {m.seed} is a {type(m.model).__name__}, "
                             f"seed {first.seed} a {type(first.model).__name__}")
        other = _structure(m.model)
        if other != reference:
            diff = next((a, b) for a, b in zip([*reference, None], [*other, None]) if a != b)
            raise ValueError(f"members differ in more than the seed: seed {first.seed} has {diff[0]}, seed "
                             f"{m.seed} has {diff[1]}")
        if (m.run_settings is None) != (first.run_settings is None):
            raise ValueError("members differ in more than the seed: only some have run settings")
        if m.run_settings is not None and first.run_settings is not None:
            own_data = datas is not None and datas[i] is not datas[0]
            free = {"seed", *(DATA_SETTINGS if own_data else ())}
            a = _json({k: v for k, v in first.run_settings.items() if k not in free})
            b = _json({k: v for k, v in m.run_settings.items() if k not in free})
            if a != b:
                diff_keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                raise ValueError(f"members differ in more than the seed: run settings {diff_keys} (seed "
                                 f"{first.seed} vs seed {m.seed})")

