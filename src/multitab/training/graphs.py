"""The training step captured once as a CUDA graph and replayed (params.yaml `train.cuda_graph`).

    plan = graph_plan(settings.cuda_graph, device, model)   # captured, or why not
    step = GraphedStep(fn, plan.new_capture(), batch_size=..., batch_dim=0)    # fn(x_num, x_cat, targets)
    loss, parts = step(x_num, x_cat, targets)                                    # one optimiser step

At the paper's batch of 2048 a step of the study's models is almost all kernel launches (per-op host cost):
a replay launches the whole step (forward, backward, optimiser) at once. `fn` is the run's own step
(zero the gradients or replace them, forward, loss, backward, `optimizer.step()`), so a replay computes
what the uncaptured step computes.

- Static buffers: a full batch is copied into buffers allocated once ((b, ...) for a separate run,
  (M, b, ...) for a stack of M members); the captured function reads only those, so a replay sees the
  batch copied in before it. The outputs (loss, per-task losses) are the capture's own tensors, read
  after each replay into the epoch's sums.
- Warm-up: the first `WARMUP_STEPS` full batches are real training steps run eagerly through the same
  buffers (CUDA wants a few on a side stream before a capture; Adam's state tensors must exist, since a
  capture records their addresses). The next full batch is captured and replayed; the later ones replayed.
- The last, partial batch of an epoch runs eagerly on its own tensors: the optimiser steps are exactly
  those of uncaptured training, with no row dropped and no padding (a padded batch would change batch norm
  and inter-sample attention). The record counts replayed, warm-up and eager steps.
- The gradients are set to None (separate run) or overwritten (stack) inside the captured function, so a
  replay never adds to the previous step's.
- The optimiser is built with `capturable=True` on CUDA (its step count lives on the device); a checkpoint
  keeps the flag it was written with, so `load_optimizer_state` sets it back to what this run needs: a
  captured run's `last.pt` resumes uncaptured and the other way round.

The CUDA-only primitive (`torch.cuda.CUDAGraph`, `torch.cuda.graph`) sits behind `Capture`; `CAPTURES`
maps a device type to one. Tests put `EagerCapture` there for "cpu": its capture stores the function and its
replay calls it, so on CPU the graph path's bookkeeping (buffers, warm-up, the partial batch, counts)
runs against the plain loop. Where CUDA differs: a real capture records kernels without running them, and
the real warm-up runs on a side stream; neither is exercised without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

__all__ = ["CAPTURES", "NOT_TORCH", "WARMUP_STEPS", "Capture", "CudaCapture", "EagerCapture", "GraphPlan",
           "GraphedStep", "StepFn", "graph_plan", "load_optimizer_state"]

NOT_TORCH = "not captured: not a torch model (trains itself)"
WARMUP_STEPS = 3  # eager full batches before the capture (PyTorch's CUDA graph notes use 3 on a side stream)

StepFn = Callable[[Tensor, Tensor, dict[str, Tensor]], tuple[Tensor, dict[str, Tensor]]]


class Capture(Protocol):
    """Capture a function once; replay it. `capturable`: the optimiser must keep its step on the device."""

    capturable: bool

    def warm_up(self, fn: Callable[[], object]) -> None: ...

    def capture(self, fn: Callable[[], object]) -> None: ...

    def replay(self) -> None: ...


class CudaCapture:
    """`torch.cuda.CUDAGraph`: `capture` records `fn`'s kernels (without running them) into a graph with
    its own memory pool; `replay` launches them."""

    capturable = True

    def __init__(self) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None

    def warm_up(self, fn: Callable[[], object]) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, fn: Callable[[], object]) -> None:
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            fn()

    def replay(self) -> None:
        assert self.graph is not None, "replay before capture"
        self.graph.replay()


class EagerCapture:
    """A stand-in without CUDA: `capture` stores the function, `replay` calls it (what a graph does, run
    eagerly): a step that read anything but the static buffers would replay the captured batch's data."""

    capturable = False

    def __init__(self) -> None:
        self.fn: Callable[[], object] | None = None

    def warm_up(self, fn: Callable[[], object]) -> None:
        fn()

    def capture(self, fn: Callable[[], object]) -> None:
        self.fn = fn

    def replay(self) -> None:
        assert self.fn is not None, "replay before capture"
        self.fn()


# device type -> its capture (tests add "cpu": EagerCapture)
CAPTURES: dict[str, Callable[[], Capture]] = {"cuda": CudaCapture}


@dataclass
class GraphPlan:
    """Whether a run's steps are captured; `reason` says why not (None: captured)."""

    requested: bool
    reason: str | None
    new_capture: Callable[[], Capture] | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"replayed_steps": 0, "warmup_steps": 0, "eager_steps": 0})

    @property
    def capturable(self) -> bool:
        return self.new_capture is not None and self.new_capture().capturable

    def add(self, counts: dict[str, int]) -> None:
        for k, v in counts.items():
            self.counts[k] += v

    def record(self) -> str | dict[str, Any]:
        """The run record's `cuda_graph`: why not captured, or the step counts (eager: each epoch's last,
        partial batch) of this process: a resumed run warms up and captures again."""
        if self.reason is not None:
            return self.reason
        return {"captured": True, **self.counts}


def graph_plan(requested: bool, device: torch.device, model: Any) -> GraphPlan:
    """The plan for a run of `model` on `device`: captured when requested and possible, else the reason.
    bf16 is captured too: the step enters and leaves autocast inside the capture, so autocast's cache of the
    weights' casts is emptied within it and every replay casts the current weights again."""
    if not requested:
        return GraphPlan(False, "off")
    if not isinstance(model, torch.nn.Module):
        return GraphPlan(True, NOT_TORCH)
    if callable(getattr(model, "training_loss", None)):
        return GraphPlan(True, "not captured: the model's own training_loss "
                               "(a replay would skip its per-step Python work)")
    if device.type not in CAPTURES:
        return GraphPlan(True, f"not captured: {device.type}")
    return GraphPlan(True, None, CAPTURES[device.type])


class GraphedStep:
    """One training step, replayed from a capture for full batches (batch dimension `batch_dim` of size
    `batch_size`) and run eagerly for the others (module docstring)."""

    def __init__(self, fn: StepFn, capture: Capture, *, batch_size: int, batch_dim: int = 0,
                 warmup: int = WARMUP_STEPS) -> None:
        self.fn, self.cap, self.batch_size, self.batch_dim, self.warmup = fn, capture, batch_size, batch_dim, warmup
        self.static: tuple[Tensor, Tensor, dict[str, Tensor]] | None = None
        self.out: tuple[Tensor, dict[str, Tensor]] | None = None
        self.captured = False
        self.counts = {"replayed_steps": 0, "warmup_steps": 0, "eager_steps": 0}

    def _run_static(self) -> None:
        assert self.static is not None
        self.out = self.fn(*self.static)

    def __call__(self, x_num: Tensor, x_cat: Tensor, targets: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if x_num.shape[self.batch_dim] != self.batch_size:
            self.counts["eager_steps"] += 1
            return self.fn(x_num, x_cat, targets)
        if self.static is None:
            self.static = (x_num.clone(), x_cat.clone(), {k: v.clone() for k, v in targets.items()})
        else:
            self.static[0].copy_(x_num)
            self.static[1].copy_(x_cat)
            for k, v in targets.items():
                self.static[2][k].copy_(v)
        if self.counts["warmup_steps"] < self.warmup:
            self.cap.warm_up(self._run_static)
            self.counts["warmup_steps"] += 1
        else:
            if not self.captured:
                self.cap.capture(self._run_static)
                self.captured = True
            self.cap.replay()
            self.counts["replayed_steps"] += 1
        assert self.out is not None
        return self.out


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """`optimizer.load_state_dict(state)`, keeping the optimiser's own `capturable` flags (a state dict
    brings the flag of the run that wrote it); a capturable optimiser gets its step counts on the device."""
    flags = [group.get("capturable", False) for group in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flag in zip(optimizer.param_groups, flags, strict=True):
        group["capturable"] = flag
        if not flag:
            continue
        for p in group["params"]:
            s = optimizer.state.get(p, {})
            if "step" in s:
                s["step"] = s["step"].to(dtype=torch.float32, device=p.device)
