"""The stacked step: M models of one architecture as one set of stacked tensors, trained by one vmapped step.

    stack = Stack(plain_copy(model), runs, settings, loss_fn)   # runs: epochs.RunState, one per member
    stats = stack.train_epoch(split, settings, device, epoch)    # epochs.EpochStats, sums one per member
    stack.unstack(i)                                             # member i's slice back into its own model

The members' parameters and buffers are stacked along a new leading axis (member m at index m); one step
is `vmap(grad_and_value(loss))` over `torch.func.functional_call` of a parameterless copy of the model with
the reference ops, each member on its own batch (its own permutation of the training rows). One Adam/AdamW
runs over per-member views of the stacked parameters, so each member's optimiser state is its own and
reads back in the separate run's `state_dict` layout. Why this equals the separate runs: stacked.py.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm.auto import tqdm

from multitab.models.accelerate import ACCELERATED
from multitab.training.data import TensorSplit
from multitab.training.epochs import EpochStats, RunState
from multitab.training.graphs import Capture, GraphedStep, load_optimizer_state
from multitab.training.loop import optimizer_for
from multitab.training.losses import MultitaskLoss
from multitab.training.settings import RunSettings

__all__ = ["Stack", "plain_copy", "reference_type", "vmap_attention"]

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


def reference_type(module: nn.Module) -> type[nn.Module]:
    """The model file's class of a module (the CPU-kernel subclasses of accelerate.py map to their base)."""
    cls = type(module)
    return cls.__bases__[0] if cls in ACCELERATED else cls


def plain_copy(model: nn.Module) -> nn.Module:
    """A parameterless copy of `model` (on the meta device) with the reference ops: the stacked step's
    function, called with the stacked tensors by `functional_call`."""
    base = copy.deepcopy(model).to("meta")
    for module in base.modules():
        module.__class__ = reference_type(module)
    return base


@dataclass
class _Batch:
    x_num: Tensor  # (M, b, n_num)
    x_cat: Tensor  # (M, b, n_cat)
    targets: dict[str, Tensor]  # task -> (M, b)


def _stacked_batches(split: TensorSplit, orders: Tensor, batch_size: int, device: torch.device,
                     datasets: list[int] | None = None) -> Iterator[_Batch]:
    """Member m's batches are `iterate_batches`' with permutation `orders[m]`: the same rows, in order. With
    `datasets`, `split`'s tensors hold several datasets' rows stacked (stacked_data.py) and member m's rows
    come from slice `datasets[m]`."""
    n = int(split.x_num.shape[-2])

    def targets(y_float: Tensor, y_long: Tensor) -> dict[str, Tensor]:
        out = {t: y_float[..., i] for i, t in enumerate(split.float_tasks)}
        out.update({t: y_long[..., i] for i, t in enumerate(split.long_tasks)})
        return out

    non_blocking = split.x_num.is_pinned() if split.device.type == "cpu" else False
    if split.device.type == "cpu":
        idx_all = orders.cpu().numpy()
        arrays = [t.numpy() for t in (split.x_num, split.x_cat, split.y_float, split.y_long)]
        which = None if datasets is None else np.asarray(datasets)[:, None]
        for start in range(0, n, batch_size):
            idx = idx_all[:, start : start + batch_size]
            x_num, x_cat, y_float, y_long = (
                torch.from_numpy(np.take(a, idx, axis=0) if which is None else a[which, idx]).to(
                    device, non_blocking=non_blocking) for a in arrays)
            yield _Batch(x_num, x_cat, targets(y_float, y_long))
        return
    orders = orders.to(split.device)
    rows_of = None if datasets is None else torch.tensor(datasets, device=split.device)[:, None]
    for start in range(0, n, batch_size):
        rows = orders[:, start : start + batch_size]
        if rows_of is None:
            yield _Batch(split.x_num[rows], split.x_cat[rows], targets(split.y_float[rows], split.y_long[rows]))
        else:
            yield _Batch(split.x_num[rows_of, rows], split.x_cat[rows_of, rows],
                         targets(split.y_float[rows_of, rows], split.y_long[rows_of, rows]))


class Stack:
    """The members' parameters and buffers stacked (member m at index m), one optimiser over the members'
    views, and the vmapped training step. `base`: `plain_copy` of the members' model; each member's
    `optimizer_state` (None: fresh) is where its optimiser starts, and `unstack` writes it back there."""

    def __init__(self, base: nn.Module, members: list[RunState], settings: RunSettings, loss_fn: MultitaskLoss,
                 capture: Capture | None = None) -> None:
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
        self.optimizer = optimizer_for(self.views, settings, capturable=capture is not None and capture.capturable)
        self._load_optimizer_states([m.optimizer_state for m in members])

        def member_loss(params: dict[str, Tensor], fixed: dict[str, Tensor], x_num: Tensor, x_cat: Tensor,
                        targets: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
            outputs = functional_call(base, (params, fixed), (x_num, x_cat))
            return loss_fn(outputs, targets)

        self.step_fn = vmap(grad_and_value(member_loss, has_aux=True), randomness="error")
        # train.cuda_graph: full (M, b, ...) batches replay one captured step (graphs.py); the others run eagerly
        self.graphed = None if capture is None else GraphedStep(self._step, capture, batch_size=settings.batch_size,
                                                                batch_dim=1)

    def _step(self, x_num: Tensor, x_cat: Tensor, targets: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One vmapped step of every member: the gradients copied over the previous ones (never added), one
        optimiser step; (loss, per-task losses) of shape (M,)."""
        grads, (loss, parts) = self.step_fn(self.params, self.fixed, x_num, x_cat, targets)
        for name, g in grads.items():
            self.grads[name].copy_(g)
        self.optimizer.step()
        return loss.detach(), {k: v.detach() for k, v in parts.items()}

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
                raise ValueError(f"{self.members[i].name}: the checkpoint's optimiser state does not fit "
                                 f"the model ({n} parameters in one group expected)")
            for j, value in state["state"].items():
                combined["state"][i * n + int(j)] = value
        combined["param_groups"] = [{**states[0]["param_groups"][0], "params": list(range(len(self.views)))}]  # type: ignore[index]
        load_optimizer_state(self.optimizer, combined)

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

    def train_epoch(self, split: TensorSplit, settings: RunSettings, device: torch.device, epoch: int,
                    datasets: list[int] | None = None) -> EpochStats:
        """One epoch of every member, each on its own permutation of its training rows (`split`, or its slice
        `datasets[m]` of a stack of datasets: `_stacked_batches`): loss sums of shape (M,). Run under
        `vmap_attention(device)`."""
        m = len(self.members)
        n = int(split.x_num.shape[-2])
        t0 = time.perf_counter()
        data_seconds = 0.0
        t_data = time.perf_counter()
        orders = torch.stack([torch.randperm(n, generator=s.generator, device=s.generator.device)
                              for s in self.members])
        loss_sum = torch.zeros(m, device=device, dtype=torch.float64)
        task_sums: dict[str, Tensor] = {}
        bar = tqdm(total=n * m, unit="sample", unit_scale=True,
                   desc=f"epoch {epoch + 1}/{settings.max_epochs} ({m} stacked)",
                   disable=not settings.progress, leave=False, mininterval=1.0)
        batches = _stacked_batches(split, orders, settings.batch_size, device, datasets)
        data_seconds += time.perf_counter() - t_data
        step = 0
        step_fn = self.graphed if self.graphed is not None else self._step
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_FALLBACK_WARNING)
            while True:
                t_data = time.perf_counter()
                batch = next(batches, None)
                data_seconds += time.perf_counter() - t_data
                if batch is None:
                    break
                try:
                    loss, parts = step_fn(batch.x_num, batch.x_cat, batch.targets)
                except RuntimeError as e:
                    if "randomness" in str(e):
                        raise ValueError("the model draws random numbers in training (dropout, noise): stacked "
                                         f"members could not equal their separate runs ({e})") from None
                    raise
                loss_sum += loss
                for k, v in parts.items():
                    if k not in task_sums:
                        task_sums[k] = torch.zeros(m, device=device, dtype=torch.float64)
                    task_sums[k] += v
                bar.update(batch.x_num.shape[0] * batch.x_num.shape[1])
                if settings.on_step is not None:
                    settings.on_step(epoch, step)
                step += 1
        bar.close()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return EpochStats(loss_sum, task_sums, step, n * m, time.perf_counter() - t0, data_seconds)

