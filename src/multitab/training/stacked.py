"""Several seeds of one run trained as one stacked model; each member ends where its separate run ends.

    results = train_stacked(members, data, settings)   # one RunResult per member, as `train` returns it
    records = run_training_stacked(specs, run)         # as `run_training`, one (record, history) per spec

M runs that differ only in their seed (same model, hyperparameters, batch size, epochs, optimiser, device)
and, where each has its own ProcessedData, in their data of one shape (stacked_data.py) train as one: their
parameters and buffers are stacked along a new leading axis and one step is `vmap(grad_and_value(loss))` over
`torch.func.functional_call` of the model, each member on its own batch.
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
- early stopping, validation, history and checkpoints: per member, by the separate run's own epoch loop
  (`epochs.run_epochs`, `loop.evaluate_best`), which here trains an epoch with the vmapped step: after
  each epoch the member's slice is copied into its own model, which is validated with `evaluate` and saved
  to its own folder exactly as a separate run saves it (same keys, same fingerprint), so a separate run
  resumes a member's `last.pt` and a stacked run resumes a separate run's. A member that stops (early, or at
  the epoch budget) leaves the stack: the remaining members are stacked again from their states, so nothing
  after its stop reaches its results or checkpoints; its test metrics come from its own `best.pt`;
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
- `precision: bf16` or `tf32` (other kernels, or inputs rounded to TF32: stacked_checks.py), `compile` on CUDA;
- models with a `training_loss` or `fit_context` hook (MAYA), models that are not torch modules (XGBoost);
- members that differ in anything but their seed and data (model class, any module's settings, parameter
  shapes, run settings other than those naming the data) or share a checkpoint folder; data of other shapes
  (features, tasks, training rows: `stacked_data.check_same_shape`, named in the error).

Resume: each member resumes from its own `last.pt` under `checkpoint.resume`'s rules (fingerprint, epoch
budget, a lost `best.pt`). Members that already finished (stopped early or at the budget) are not trained
again; the others are grouped by the epoch they resume from, and each group trains as its own stack, one
group after another (after a stacked run killed between two members' checkpoint saves, the members one
epoch behind train as a second, smaller stack: the same per-member computation, only less batched).

Where the code is: the stacked tensors, their optimiser and the vmapped step in stacked_step.py; what can
stack in stacked_checks.py; the members' training here.

Timing fields (`train_seconds`, `samples_per_second`, the history's `epoch_seconds`, `data_seconds`,
`samples_per_second`) are each member's share: the stacked epoch's wall time divided by the members in the
stack, plus the member's own validation.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import multitab.training.checkpoint as ckpt
from multitab.metrics import mean_metric
from multitab.models.accelerate import accelerate_cpu
from multitab.runs.record import RunConfig
from multitab.training.compute_mode import computing
from multitab.training.data import ProcessedData
from multitab.training.device import resolve_device, seed_everything
from multitab.training.epochs import EpochStats, RunState, run_epochs, start_run
from multitab.training.evaluate import evaluate, evaluation_batch
from multitab.training.graphs import GraphPlan, graph_plan
from multitab.training.loop import RunResult, evaluate_best
from multitab.training.losses import MultitaskLoss
from multitab.training.run import RunSpec, build_run_model, load_run_data, torch_record, torch_run
from multitab.training.settings import RunSettings
from multitab.training.stacked_checks import (
    StackMember,
    StackRefused,
    check_hparams,
    check_stackable,
    check_training,
)
from multitab.training.stacked_data import StackData, check_same_shape, stack_data
from multitab.training.stacked_step import Stack, plain_copy, vmap_attention

log = logging.getLogger(__name__)

# _Group builds its stacks through this module's name (tests wrap it to see each stack's size)
_Stack = Stack

__all__ = ["StackMember", "StackRefused", "check_hparams", "check_stackable", "check_training", "global_rng_state",
           "run_training_stacked", "seeded", "train_stacked", "vmap_attention"]


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


# --------------------------------------------------------------------------------------- the training
def train_stacked(members: Sequence[StackMember], data: ProcessedData | Sequence[ProcessedData],
                  settings: RunSettings) -> list[RunResult]:
    """Train `members` (runs that differ only in their seed and, with one ProcessedData per member in `data`,
    in their data of one shape; `settings.seed` is not used, each member has its own) as one stacked model,
    each resuming from its own `last.pt` when it matches; test each member's best epoch on its own data;
    return one `RunResult` per member, in order, each what `loop.train` returns for its separate run (up to
    float rounding; module docstring). Refuses what it cannot make equal (`check_stackable`,
    `stacked_data.check_same_shape`)."""
    datas = [data] * len(members) if isinstance(data, ProcessedData) else list(data)
    if len(datas) != len(members):
        raise ValueError(f"stacked training got {len(datas)} datasets for {len(members)} members")
    check_same_shape(datas)  # first: data of other shapes build models of other shapes
    check_stackable(members, settings, datas)
    device = resolve_device(settings.device)
    loss_fn = MultitaskLoss(datas[0].schema.tasks)
    base = plain_copy(members[0].model)
    base.train()
    for spec in members:
        spec.model.to(device)
        if device.type == "cpu":
            accelerate_cpu(spec.model)  # the members validate and test as their separate runs do
    rows = stack_data(datas, device)
    eval_args: dict[str, Any] = {"device": device, "precision": settings.precision,
                                 "batch_size": evaluation_batch(base, settings.batch_size, settings.eval_batch_size)}
    plan = graph_plan(settings.cuda_graph, device, members[0].model)
    states = [_start(spec, settings, rows.split.device) for spec in members]
    groups: dict[int, list[RunState]] = {}
    counts: dict[int, dict[str, int]] = {}  # id of a member's state -> its graph step counts
    for s in states:
        if not s.finished(settings.max_epochs):
            groups.setdefault(s.epoch, []).append(s)
    if len(groups) > 1:
        log.info("members resume from different epochs %s: one stack per epoch, trained one after another",
                 sorted(groups))
    member_of = {id(s): i for i, s in enumerate(states)}
    for epoch in sorted(groups, reverse=True):
        group = _Group(base, groups[epoch], rows, member_of, settings, device, loss_fn, eval_args, plan)
        run_epochs(groups[epoch], group, max_epochs=settings.max_epochs, n_train=rows.n_train, stacked=True)
        counts.update(group.counts)
    results = [evaluate_best(s.model, s.model, d, d.splits["train"], s.checkpoint_dir, s.run_fingerprint,
                             s.run_settings, eval_args=eval_args, stopper=s.stopper, epochs=s.epoch,
                             stopped_early=s.stopped, train_seconds=s.train_seconds, loop_seconds=s.loop_seconds,
                             samples_seen=s.samples_seen, history=s.history, resumed_from=s.resumed_from)
               for s, d in zip(states, datas)]
    for s, result in zip(states, results, strict=True):
        # each member's own steps: those of the stacks it trained in
        member = GraphPlan(plan.requested, plan.reason)
        member.add(counts.get(id(s), {}))
        result.cuda_graph = member.record() if plan.requested else None
    return results


def _start(spec: StackMember, settings: RunSettings, generator_device: torch.device) -> RunState:
    """A member from scratch, or from its `last.pt` as `loop.train` resumes one; its optimiser and global RNG
    states kept in its state (nothing in stacked training draws from the global RNGs)."""
    rng = spec.rng if spec.rng is not None else global_rng_state()
    generator = torch.Generator(device=generator_device)
    generator.manual_seed(spec.seed)
    state, last = start_run(spec.model, spec.checkpoint_dir, spec.run_fingerprint, spec.run_settings, settings,
                            generator, name=f"seed {spec.seed}")
    state.rng = rng
    if last is not None:
        state.optimizer_state = last["optimizer"]
        state.rng = {k: v for k, v in last["rng"].items() if k != "batches"}
    return state


class _Group:
    """The `EpochTrainer` (epochs.py) of members at the same epoch: one stack of them, built again from the
    others' states when some finish. `member_of[id(run)]`: the run's index in `rows.datas`."""

    def __init__(self, base: nn.Module, members: list[RunState], rows: StackData, member_of: dict[int, int],
                 settings: RunSettings, device: torch.device, loss_fn: MultitaskLoss, eval_args: dict[str, Any],
                 plan: GraphPlan) -> None:
        self.base, self.rows, self.member_of, self.settings, self.device = base, rows, member_of, settings, device
        self.loss_fn, self.eval_args, self.plan = loss_fn, eval_args, plan
        self.counts: dict[int, dict[str, int]] = {}
        self.stack = self._new_stack(members)

    def _new_stack(self, members: list[RunState]) -> Stack:
        """A stack of `members`; captured again (its own tensors, its own optimiser) when the plan says so."""
        capture = self.plan.new_capture() if self.plan.new_capture is not None else None
        return _Stack(self.base, members, self.settings, self.loss_fn, capture)

    def train_epoch(self, runs: list[RunState], epoch: int) -> EpochStats:
        of = self.rows.dataset_of
        datasets = None if of is None else [of[self.member_of[id(r)]] for r in self.stack.members]
        graphed = self.stack.graphed
        before = dict(graphed.counts) if graphed is not None else {}
        with vmap_attention(self.device):
            stats = self.stack.train_epoch(self.rows.split, self.settings, self.device, epoch, datasets)
        if graphed is not None:
            for run in runs:
                mine = self.counts.setdefault(id(run), dict.fromkeys(graphed.counts, 0))
                for k, v in graphed.counts.items():
                    mine[k] += v - before[k]
        return stats

    def validate(self, index: int, run: RunState) -> tuple[dict[str, float], float]:
        assert self.stack.members[index] is run  # run_epochs' runs are the stack's members, in order
        self.stack.unstack(index)
        data = self.rows.datas[self.member_of[id(run)]]
        val_metrics, _, _ = evaluate(run.model, run.model, data, "val", data.splits["train"], **self.eval_args)
        return val_metrics, mean_metric(val_metrics)

    def saved_states(self, index: int, run: RunState) -> tuple[dict[str, Any], dict[str, Any]]:
        return run.optimizer_state or {}, {**(run.rng or {}), "batches": run.generator.get_state()}

    def regroup(self, remaining: list[RunState]) -> None:
        self.stack = self._new_stack(remaining)


# ---------------------------------------------------------------------------------------- the stages
def run_training_stacked(
    specs: Sequence[RunSpec], run: RunConfig, *,
    on_step: Callable[[int, int], None] | None = None,
) -> list[tuple[dict[str, Any], list[dict[str, float]]]]:
    """`run_training` of several runs that differ only in their seed and their data (same model,
    configuration and hyperparameters; `data_path` and `dataset` may differ where the data have one shape:
    stacked_data.py), trained as one stack: one (metrics record, history) per spec, each what `run_training`
    returns for it (up to float rounding), with the same checkpoints. Each data folder is read once.
    StackRefused (before anything is read or written) where the model or settings cannot stack; ValueError
    where the specs differ in more, or their data in shape."""
    if not specs:
        raise ValueError("stacked training needs at least one run")
    first = specs[0]
    for spec in specs[1:]:
        if spec.model != first.model:
            raise ValueError(f"stacked runs differ in more than the seed and data: {spec} vs {first}")
    check_training(run, first.model)
    base_model = first.model.partition("@")[0]
    config = run.train
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    loaded: dict[Path, ProcessedData] = {}
    for spec in specs:
        path = Path(spec.data_path).resolve()
        if path not in loaded:
            loaded[path] = load_run_data(spec, config, resolve_device(config.device))
    datas = [loaded[Path(spec.data_path).resolve()] for spec in specs]
    check_same_shape(datas)  # before any model is built
    members, runs = [], []
    for spec, data in zip(specs, datas):
        model, rng = seeded(spec.seed, functools.partial(build_run_model, base_model, data.meta, spec, run),
                            config.deterministic)
        one = torch_run(spec, run, data, model, on_step=on_step)
        members.append(StackMember(spec.seed, model, spec.checkpoint_dir, one.fingerprint, one.run_settings, rng))
        runs.append(one)
    for one in runs[1:]:
        if dataclasses.replace(one.settings, seed=runs[0].settings.seed) != runs[0].settings:
            raise ValueError("stacked runs differ in more than the seed: their loop settings differ")
    with computing(resolve_device(config.device), config.precision, config.deterministic) as mode:
        results = train_stacked(members, datas, runs[0].settings)
    return [(torch_record(spec, run, data, member.model, one, result) | mode.record(), result.history)
            for spec, data, member, one, result in zip(specs, datas, members, runs, results)]
