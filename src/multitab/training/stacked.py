"""Several seeds of one run trained as one stacked model; each member ends where its separate run ends.

    results = train_stacked(members, data, settings)   # one RunResult per member, as `train` returns it
    records = run_training_stacked(specs, run)         # as `run_training`, one (record, history) per spec

M runs that differ only in their seed (same model, hyperparameters, data, batch size, epochs, optimiser,
device) train as one: their parameters and buffers are stacked along a new leading axis and one step is
`vmap(grad_and_value(loss))` over `torch.func.functional_call` of the model, each member on its own batch.
What makes member m equal to the separate run with its seed:

- initialisation: each member's model is built right after `seed_everything(seed)`, as `run_training`
  builds it (`seeded`), then stacked; the global RNG states after the build are what its checkpoints store;
- shuffling: each member has its own batch generator seeded with its seed, drawing one `randperm` per epoch
  as `data.iterate_batches` does, so its batches hold the same rows in the same order;
- optimiser: ONE Adam/AdamW over per-member views of the stacked parameters (member m's view of a stacked
  tensor is exactly the shape of the separate run's parameter). Adam and AdamW (weight decay included)
  act on each element on its own, so this is M optimisers; and since each view has the separate
  parameter's shape, even the fused kernel treats every element as the separate run does (its vectorised
  loop and its scalar tail can round differently, and over whole stacked tensors elements would move
  between them: seen with fused AdamW on this CPU; tests/test_training_stacked.py checks that the views
  are bitwise M optimisers). Each member's optimiser state is its own and
  is written in the separate run's `state_dict` format;
- early stopping, validation, history and checkpoints: per member, with the loop's own code
  (`loop.history_row`, `loop.save_epoch`, `loop.evaluate_best`): after each epoch the member's slice is
  copied into its own model, which is validated with `evaluate` and saved to its own folder exactly as a
  separate run saves it (same keys, same fingerprint), so a separate run resumes a member's `last.pt` and a
  stacked run resumes a separate run's. A member that stops (early, or at the epoch budget) leaves the
  stack: the remaining members are stacked again from their states, so nothing after its stop reaches its
  results or checkpoints; its test metrics come from its own `best.pt`;
- CPU kernels: the stacked step runs the models' reference PyTorch ops (the chunked CPU kernels of
  `models/accelerate.py` are autograd Functions without a vmap rule); the members' own models, which
  validate and test, take the kernels on CPU as a separate run's model does. Both compute the same function
  up to float summation order (tests/test_cpu_kernels.py).

Equality is up to float rounding, not bitwise: the stacked step runs batched kernels (bmm instead of mm,
vmapped batch norm), whose summation order differs from the separate run's in the last bits; with Adam the
difference grows where a gradient is itself rounding noise (the bias of a layer followed by batch norm has
gradient exactly 0 in exact arithmetic: Adam turns its rounding noise into steps of up to `lr`), see
tests/test_training_stacked.py for the tolerances and why.

Refused (ValueError naming why), because the members could not equal their separate runs:
- dropout > 0 (the separate runs draw their masks one after another from one global generator; the
  vmapped step also runs with `randomness="error"`, so any random op in training stops it);
- `precision: bf16`, `compile` on CUDA (other kernels than the separate runs');
- models with a `training_loss` or `fit_context` hook (MAYA), models that are not torch modules (XGBoost);
- members that differ in anything but their seed (model class, any module's settings, parameter shapes,
  run settings) or share a checkpoint folder.

Resume: each member resumes from its own `last.pt` under `checkpoint.resume`'s rules (fingerprint, epoch
budget, a lost `best.pt`). Members that already finished (stopped early or at the budget) are not trained
again; the others are grouped by the epoch they resume from, and each group trains as its own stack, one
group after another (after a stacked run killed between two members' checkpoint saves, the members one
epoch behind train as a second, smaller stack: the same per-member computation, only less batched).

Timing fields (`train_seconds`, `samples_per_second`, the history's `epoch_seconds`, `data_seconds`,
`samples_per_second`) are each member's share: the stacked epoch's wall time divided by the members in the
stack, plus the member's own validation.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from multitab.metrics import mean_metric
from multitab.models import model_class
from multitab.models.accelerate import ACCELERATED, accelerate_cpu
from multitab.run_config import RunConfig
from multitab.training import checkpoint as ckpt
from multitab.training.data import ProcessedData, TensorSplit, place
from multitab.training.device import resolve_device, seed_everything
from multitab.training.early_stopping import EarlyStopping
from multitab.training.evaluate import evaluate
from multitab.training.loop import (
    RunResult,
    RunSettings,
    evaluate_best,
    history_row,
    optimizer_for,
    save_epoch,
    smoothed_note,
)
from multitab.training.losses import MultitaskLoss
from multitab.training.run import RunSpec, build_run_model, load_run_data, torch_record, torch_run

log = logging.getLogger(__name__)

__all__ = ["StackMember", "StackRefused", "check_hparams", "check_stackable", "check_training", "global_rng_state",
           "run_training_stacked", "seeded", "train_stacked"]

_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
# vmap's per-sample fallback for ops without a batching rule (CPU flash attention): correct, only unbatched.
_FALLBACK_WARNING = "There is a performance drop because we have not yet implemented the batching rule"


def vmap_attention(device: torch.device) -> AbstractContextManager[None]:
    """The attention kernels the vmapped step may use on `device`. On CUDA, math only: the memory-efficient
    kernel's batching rule flattens an attention mask into a layout the kernel refuses whenever the token
    count is not a multiple of 4 ("attn_bias is not correctly aligned (strideH)"; MultiTab-Net at 35 and 39
    tokens, torch 2.11 on an H100, results/benchmarks/gpu/gpu_session_*.log), and fp32 has no flash kernel
    for a mask. The math kernel is the same function (the separate run's kernel on CUDA differs from it in
    rounding only). On CPU nothing changes."""
    return sdpa_kernel([SDPBackend.MATH]) if device.type == "cuda" else nullcontext()


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


def global_rng_state() -> dict[str, Any]:
    """The global RNG states (torch, numpy, Python, CUDA) as checkpoints store them, without the batch
    generator's."""
    state = ckpt.rng_state(torch.Generator())
    del state["batches"]
    return state


def seeded(seed: int, build: Callable[[], nn.Module], deterministic: bool = True) -> tuple[nn.Module, dict[str, Any]]:
    """`seed_everything(seed, deterministic)`, then `build()`: the model a separate run with this seed
    starts from, and the global RNG states after building it (`StackMember.rng`)."""
    seed_everything(seed, deterministic)
    model = build()
    return model, global_rng_state()


# ------------------------------------------------------------------------------------------ refusals
class StackRefused(ValueError):
    """The model or the training settings cannot train as a stack equal to the separate runs (dropout > 0,
    bf16, compile, a model that trains itself or has its own objective). Raised before anything trains or
    is written, so the caller may train the runs one after another instead. Any other ValueError of this
    module is an error in the request (members that differ in more than the seed, ...)."""


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


def _reference_type(module: nn.Module) -> type[nn.Module]:
    """The model file's class of a module (the CPU-kernel subclasses of accelerate.py map to their base)."""
    cls = type(module)
    return cls.__bases__[0] if cls in ACCELERATED else cls


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str | tuple | list) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type))


def _structure(model: nn.Module) -> list[tuple[Any, ...]]:
    """What two models of the same constructor call share: every module's class and plain settings, every
    parameter's and buffer's name, shape, dtype (and whether it trains)."""
    out: list[tuple[Any, ...]] = []
    for name, module in model.named_modules():
        settings = sorted((k, repr(v)) for k, v in vars(module).items()
                          if not k.startswith("_") and k != "training" and _plain(v))
        out.append(("module", name, _reference_type(module).__qualname__, settings))
    out += [("parameter", n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in model.named_parameters()]
    out += [("buffer", n, tuple(b.shape), b.dtype) for n, b in model.named_buffers()]
    return out


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


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
                           "and eager only (bf16 autocast and compiled kernels differ from the separate runs')")
    check_hparams(hparams.model, hparams.file or "hyperparameters")


def check_stackable(members: Sequence[StackMember], settings: RunSettings) -> None:
    """StackRefused naming why, when the members' models or settings cannot stack; ValueError when the
    members differ in more than the seed."""
    if not members:
        raise ValueError("stacked training needs at least one member")
    if settings.precision != "fp32":
        raise StackRefused(f"stacked training runs in fp32 only (precision {settings.precision!r}): bf16 autocast "
                         "takes other kernels than the separate runs'")
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
    for m in members[1:]:
        if type(m.model) is not type(first.model) and _reference_type(m.model) is not _reference_type(first.model):
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
            a = _json({k: v for k, v in first.run_settings.items() if k != "seed"})
            b = _json({k: v for k, v in m.run_settings.items() if k != "seed"})
            if a != b:
                diff_keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                raise ValueError(f"members differ in more than the seed: run settings {diff_keys} (seed "
                                 f"{first.seed} vs seed {m.seed})")


# ----------------------------------------------------------------------------------- the member state
@dataclass
class _Member:
    """One member's progress, kept as its separate run keeps it."""

    spec: StackMember
    generator: torch.Generator
    rng: dict[str, Any]  # global RNG states its checkpoints store (nothing in stacked training draws from them)
    stopper: EarlyStopping
    history: list[dict[str, float]] = field(default_factory=list)
    epoch: int = 0
    resumed_from: int = 0
    stopped: bool = False
    train_seconds: float = 0.0
    loop_seconds: float = 0.0
    samples_seen: int = 0
    optimizer_state: dict[str, Any] | None = None  # the separate run's optimizer.state_dict(); None: fresh

    @property
    def model(self) -> nn.Module:
        return self.spec.model

    def finished(self, max_epochs: int) -> bool:
        return self.stopped or self.epoch >= max_epochs


def _start(spec: StackMember, settings: RunSettings, generator_device: torch.device) -> _Member:
    """A member from scratch, or from its `last.pt` as `loop.train` resumes one."""
    generator = torch.Generator(device=generator_device)
    generator.manual_seed(spec.seed)
    member = _Member(spec, generator, spec.rng if spec.rng is not None else global_rng_state(),
                     EarlyStopping(settings.patience, smoothing=settings.early_stopping_smoothing))
    checkpoint_dir = Path(spec.checkpoint_dir)
    last = ckpt.resume(checkpoint_dir, spec.run_fingerprint, spec.run_settings)
    if last is None:
        return member
    spec.model.load_state_dict(last["model"])
    member.optimizer_state = last["optimizer"]
    generator.set_state(last["rng"]["batches"])
    member.rng = {k: v for k, v in last["rng"].items() if k != "batches"}
    member.stopper = EarlyStopping.resume(last["early_stopping"], settings.early_stopping_smoothing)
    member.history = list(last["history"])
    member.epoch = member.resumed_from = int(last["epoch"])
    member.train_seconds, member.loop_seconds = float(last["train_seconds"]), float(last["loop_seconds"])
    member.samples_seen = int(last["samples_seen"])
    member.stopped = bool(last.get("stopped", False))
    log.info("seed %d: resuming from %s after epoch %d", spec.seed, checkpoint_dir / ckpt.LAST, member.epoch)
    return member


# ------------------------------------------------------------------------------------------ the stack
def _plain_copy(model: nn.Module) -> nn.Module:
    """A parameterless copy of `model` (on the meta device) with the reference ops: the stacked step's
    function, called with the stacked tensors by `functional_call`."""
    base = copy.deepcopy(model).to("meta")
    for module in base.modules():
        module.__class__ = _reference_type(module)
    return base


@dataclass
class _Batch:
    x_num: Tensor  # (M, b, n_num)
    x_cat: Tensor  # (M, b, n_cat)
    targets: dict[str, Tensor]  # task -> (M, b)


def _stacked_batches(split: TensorSplit, orders: Tensor, batch_size: int, device: torch.device) -> Iterator[_Batch]:
    """Member m's batches are `iterate_batches`' with permutation `orders[m]`: the same rows, in order."""
    n = len(split)

    def targets(y_float: Tensor, y_long: Tensor) -> dict[str, Tensor]:
        out = {t: y_float[..., i] for i, t in enumerate(split.float_tasks)}
        out.update({t: y_long[..., i] for i, t in enumerate(split.long_tasks)})
        return out

    non_blocking = split.x_num.is_pinned() if split.device.type == "cpu" else False
    if split.device.type == "cpu":
        idx_all = orders.cpu().numpy()
        arrays = [t.numpy() for t in (split.x_num, split.x_cat, split.y_float, split.y_long)]
        for start in range(0, n, batch_size):
            idx = idx_all[:, start : start + batch_size]
            x_num, x_cat, y_float, y_long = (torch.from_numpy(np.take(a, idx, axis=0)).to(device, non_blocking=non_blocking)
                                             for a in arrays)
            yield _Batch(x_num, x_cat, targets(y_float, y_long))
        return
    orders = orders.to(split.device)
    for start in range(0, n, batch_size):
        rows = orders[:, start : start + batch_size]
        yield _Batch(split.x_num[rows], split.x_cat[rows], targets(split.y_float[rows], split.y_long[rows]))


class _Stack:
    """The members' parameters and buffers stacked (member m at index m), one optimiser over the members'
    views, and the vmapped training step."""

    def __init__(self, base: nn.Module, members: list[_Member], settings: RunSettings, loss_fn: MultitaskLoss) -> None:
        self.members = members
        models = [m.model for m in members]
        named = [dict(model.named_parameters()) for model in models]
        self.trainable = [n for n, p in models[0].named_parameters() if p.requires_grad]
        frozen = [n for n, p in models[0].named_parameters() if not p.requires_grad]
        with torch.no_grad():
            self.params = {n: torch.stack([d[n].detach() for d in named]) for n in self.trainable}
            self.fixed = {n: torch.stack([d[n].detach() for d in named]) for n in frozen}
            buffers = [dict(model.named_buffers()) for model in models]
            self.fixed.update({n: torch.stack([d[n] for d in buffers]) for n in buffers[0]})
        self.grads = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.views: list[Tensor] = []  # member-major: member m's parameters in `parameters()` order
        for i in range(len(members)):
            for n in self.trainable:
                view = self.params[n][i]
                view.grad = self.grads[n][i]
                self.views.append(view)
        self.optimizer = optimizer_for(self.views, settings)
        self._load_optimizer_states([m.optimizer_state for m in members])

        def member_loss(params: dict[str, Tensor], fixed: dict[str, Tensor], x_num: Tensor, x_cat: Tensor,
                        targets: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
            outputs = functional_call(base, (params, fixed), (x_num, x_cat))
            return loss_fn(outputs, targets)

        self.step_fn = vmap(grad_and_value(member_loss, has_aux=True), randomness="error")

    def _load_optimizer_states(self, states: list[dict[str, Any] | None]) -> None:
        if all(s is None for s in states):
            return
        if any(s is None for s in states):
            raise RuntimeError("a stack mixes fresh and resumed members")  # grouping by epoch prevents it
        n = len(self.trainable)
        combined: dict[str, Any] = {"state": {}, "param_groups": []}
        for i, state in enumerate(states):
            assert state is not None
            groups = state["param_groups"]
            if len(groups) != 1 or list(groups[0]["params"]) != list(range(n)):
                raise ValueError(f"seed {self.members[i].spec.seed}: the checkpoint's optimiser state does not fit "
                                 f"the model ({n} parameters in one group expected)")
            for j, value in state["state"].items():
                combined["state"][i * n + int(j)] = value
        combined["param_groups"] = [{**states[0]["param_groups"][0], "params": list(range(len(self.views)))}]  # type: ignore[index]
        self.optimizer.load_state_dict(combined)

    def optimizer_state(self, i: int) -> dict[str, Any]:
        """Member i's optimiser state in the separate run's `optimizer.state_dict()` format."""
        n = len(self.trainable)
        state = {j: dict(self.optimizer.state[self.views[i * n + j]]) for j in range(n)
                 if self.views[i * n + j] in self.optimizer.state}
        group = {k: v for k, v in self.optimizer.param_groups[0].items() if k != "params"}
        return {"state": state, "param_groups": [{**group, "params": list(range(n))}]}

    @torch.no_grad()
    def unstack(self, i: int) -> None:
        """Copy member i's slice into its own model (validation, checkpoints, a later stack)."""
        model = self.members[i].model
        for n, p in model.named_parameters():
            p.copy_(self.params[n][i] if n in self.params else self.fixed[n][i])
        for n, b in model.named_buffers():
            b.copy_(self.fixed[n][i])
        self.members[i].optimizer_state = self.optimizer_state(i)

    def train_epoch(self, split: TensorSplit, settings: RunSettings, device: torch.device, epoch: int
                    ) -> tuple[Tensor, dict[str, Tensor], int, float, float]:
        """One epoch of every member: (loss sums [M], task loss sums, batches, seconds, data seconds)."""
        m = len(self.members)
        n = len(split)
        t0 = time.perf_counter()
        data_seconds = 0.0
        t_data = time.perf_counter()
        orders = torch.stack([torch.randperm(n, generator=s.generator, device=s.generator.device) for s in self.members])
        loss_sum = torch.zeros(m, device=device, dtype=torch.float64)
        task_sums: dict[str, Tensor] = {}
        bar = tqdm(total=n * m, unit="sample", unit_scale=True, desc=f"epoch {epoch + 1}/{settings.max_epochs} ({m} stacked)",
                   disable=not settings.progress, leave=False, mininterval=1.0)
        batches = _stacked_batches(split, orders, settings.batch_size, device)
        data_seconds += time.perf_counter() - t_data
        step = 0
        with warnings.catch_warnings(), vmap_attention(device):
            warnings.filterwarnings("ignore", message=_FALLBACK_WARNING)
            while True:
                t_data = time.perf_counter()
                batch = next(batches, None)
                data_seconds += time.perf_counter() - t_data
                if batch is None:
                    break
                try:
                    grads, (loss, parts) = self.step_fn(self.params, self.fixed, batch.x_num, batch.x_cat, batch.targets)
                except RuntimeError as e:
                    if "randomness" in str(e):
                        raise ValueError("the model draws random numbers in training (dropout, noise): stacked "
                                         f"members could not equal their separate runs ({e})") from None
                    raise
                for name, g in grads.items():
                    self.grads[name].copy_(g)
                self.optimizer.step()
                loss_sum += loss.detach()
                for k, v in parts.items():
                    if k not in task_sums:
                        task_sums[k] = torch.zeros(m, device=device, dtype=torch.float64)
                    task_sums[k] += v.detach()
                bar.update(batch.x_num.shape[0] * batch.x_num.shape[1])
                if settings.on_step is not None:
                    settings.on_step(epoch, step)
                step += 1
        bar.close()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return loss_sum, task_sums, step, time.perf_counter() - t0, data_seconds


# --------------------------------------------------------------------------------------- the training
def train_stacked(members: Sequence[StackMember], data: ProcessedData, settings: RunSettings) -> list[RunResult]:
    """Train `members` (runs that differ only in their seed; `settings.seed` is not used, each member has
    its own) as one stacked model, each resuming from its own `last.pt` when it matches; test each member's
    best epoch; return one `RunResult` per member, in order, each what `loop.train` returns for its
    separate run (up to float rounding; module docstring). Refuses what it cannot make equal
    (`check_stackable`)."""
    check_stackable(members, settings)
    device = resolve_device(settings.device)
    loss_fn = MultitaskLoss(data.schema.tasks)
    base = _plain_copy(members[0].model)
    base.train()
    for spec in members:
        spec.model.to(device)
        if device.type == "cpu":
            accelerate_cpu(spec.model)  # the members validate and test as their separate runs do
    train_split = place(data.splits["train"], device)
    data.splits = {"train": train_split, **{k: place(v, device) for k, v in data.splits.items() if k != "train"}}
    eval_args: dict[str, Any] = {"batch_size": settings.batch_size, "device": device, "precision": settings.precision}
    states = [_start(spec, settings, train_split.device) for spec in members]
    groups: dict[int, list[_Member]] = {}
    for s in states:
        if not s.finished(settings.max_epochs):
            groups.setdefault(s.epoch, []).append(s)
    if len(groups) > 1:
        log.info("members resume from different epochs %s: one stack per epoch, trained one after another",
                 sorted(groups))
    for epoch in sorted(groups, reverse=True):
        _train_group(base, groups[epoch], data, train_split, settings, device, loss_fn, eval_args)
    results = []
    for s in states:
        results.append(evaluate_best(
            s.model, s.model, data, train_split, Path(s.spec.checkpoint_dir), s.spec.run_fingerprint,
            s.spec.run_settings, eval_args=eval_args, stopper=s.stopper, epochs=s.epoch, stopped_early=s.stopped,
            train_seconds=s.train_seconds, loop_seconds=s.loop_seconds, samples_seen=s.samples_seen,
            history=s.history, resumed_from=s.resumed_from))
    return results


def _train_group(
    base: nn.Module, members: list[_Member], data: ProcessedData, train_split: TensorSplit, settings: RunSettings,
    device: torch.device, loss_fn: MultitaskLoss, eval_args: dict[str, Any],
) -> None:
    """Train members at the same epoch as one stack until each has stopped or reached the budget."""
    stack = _Stack(base, members, settings, loss_fn)
    n_train = len(train_split)
    epoch = members[0].epoch
    while stack.members:
        active = stack.members
        m = len(active)
        loss_sum, task_sums, n_batches, t_loop, t_data = stack.train_epoch(train_split, settings, device, epoch)
        loss_sums, task_loss_sums = loss_sum.tolist(), {k: v.tolist() for k, v in task_sums.items()}
        for i, s in enumerate(active):
            t0 = time.perf_counter()
            train_loss = loss_sums[i] / max(n_batches, 1)
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"seed {s.spec.seed}, epoch {epoch + 1}: training loss is {train_loss}; "
                                         "lower the learning rate (train.optim) or check the data")
            stack.unstack(i)
            val_metrics, _, _ = evaluate(s.model, s.model, data, "val", train_split, **eval_args)
            val_mean = mean_metric(val_metrics)
            improved = s.stopper.step(val_mean, epoch)
            share = t_loop / m
            epoch_seconds = share + time.perf_counter() - t0
            s.train_seconds += epoch_seconds
            s.loop_seconds += share
            s.samples_seen += n_train
            row = history_row(epoch, train_loss, {k: v[i] / max(n_batches, 1) for k, v in task_loss_sums.items()},
                              val_metrics, val_mean, epoch_seconds=epoch_seconds, data_seconds=t_data / m,
                              loop_seconds=share, n_train=n_train, criterion=s.stopper.history_fields(val_mean))
            s.history.append(row)
            log.info("seed %d, epoch %d: train loss %.4f, val mean %.4f%s%s, %.0f samples/s (%d stacked)", s.spec.seed,
                     epoch + 1, train_loss, val_mean, smoothed_note(row), " (best)" if improved else "",
                     n_train * m / t_loop if t_loop else 0, m)
            s.epoch = epoch + 1
            s.stopped = s.stopper.should_stop
            save_epoch(Path(s.spec.checkpoint_dir), s.spec.run_fingerprint, s.spec.run_settings, epoch=s.epoch,
                       improved=improved, model_state=s.model.state_dict(), val_metrics=val_metrics,
                       optimizer_state=s.optimizer_state or {}, rng={**s.rng, "batches": s.generator.get_state()},
                       stopper=s.stopper, history=s.history, stopped=s.stopped, train_seconds=s.train_seconds,
                       loop_seconds=s.loop_seconds, samples_seen=s.samples_seen)
            if s.stopped:
                log.info("seed %d: early stop after epoch %d: no improvement for %d epochs (best epoch %d)",
                         s.spec.seed, s.epoch, s.stopper.patience, s.stopper.best_epoch + 1)
        epoch += 1
        remaining = [s for s in active if not s.finished(settings.max_epochs)]
        if not remaining:
            break
        if len(remaining) < m:  # the finished leave the stack: it is built again from the others' states
            stack = _Stack(base, remaining, settings, loss_fn)


# ---------------------------------------------------------------------------------------- the stages
def run_training_stacked(
    specs: Sequence[RunSpec], run: RunConfig, *,
    on_step: Callable[[int, int], None] | None = None,
) -> list[tuple[dict[str, Any], list[dict[str, float]]]]:
    """`run_training` of several runs that differ only in their seed (same dataset, model, data folder,
    configuration and hyperparameters), trained as one stack: one (metrics record, history) per spec, each
    what `run_training` returns for it (up to float rounding), with the same checkpoints. StackRefused
    (before anything is read or written) where the model or settings cannot stack."""
    if not specs:
        raise ValueError("stacked training needs at least one run")
    first = specs[0]
    for spec in specs[1:]:
        if (spec.dataset, spec.model, Path(spec.data_path)) != (first.dataset, first.model, Path(first.data_path)):
            raise ValueError(f"stacked runs differ in more than the seed: {spec} vs {first}")
    check_training(run, first.model)
    base_model = first.model.partition("@")[0]
    config = run.train
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    data = load_run_data(first, config, resolve_device(config.device))
    members, runs = [], []
    for spec in specs:
        model, rng = seeded(spec.seed, functools.partial(build_run_model, base_model, data.meta, spec, run),
                            config.deterministic)
        one = torch_run(spec, run, data, model, on_step=on_step)
        members.append(StackMember(spec.seed, model, spec.checkpoint_dir, one.fingerprint, one.run_settings, rng))
        runs.append(one)
    for one in runs[1:]:
        if dataclasses.replace(one.settings, seed=runs[0].settings.seed) != runs[0].settings:
            raise ValueError("stacked runs differ in more than the seed: their loop settings differ")
    results = train_stacked(members, data, runs[0].settings)
    return [(torch_record(spec, run, data, member.model, one, result), result.history)
            for spec, member, one, result in zip(specs, members, runs, results)]
