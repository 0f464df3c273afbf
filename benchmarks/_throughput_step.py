"""One timed training step of benchmarks/model_throughput.py (and its --bench-shapes mode): forward, backward
and optimizer step on a random batch shaped by a dataset's schema, the plain sum of task losses, optionally
compiled, in bf16 autocast or replayed as a CUDA graph. A module beside the script, not a script.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from multitab.datasets.schema import DatasetSchema
from multitab.models.accelerate import accelerate_cpu


def random_batch(schema: DatasetSchema, n: int, device: torch.device, seed: int = 0) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, schema.n_num, generator=g)
    cards = [f.cardinality or 1 for f in schema.features if f.kind == "categorical"]
    x_cat = torch.stack([torch.randint(0, c, (n,), generator=g) for c in cards], 1) if cards else torch.zeros(
        n, 0, dtype=torch.long
    )
    y: dict[str, torch.Tensor] = {}
    for t in schema.tasks:
        if t.type == "binary":
            y[t.name] = torch.randint(0, 2, (n,), generator=g).float()
        elif t.type == "multiclass":
            y[t.name] = torch.randint(0, t.n_classes or 2, (n,), generator=g)
        else:
            y[t.name] = torch.randn(n, generator=g)
    return x_num.to(device), x_cat.to(device), {k: v.to(device) for k, v in y.items()}


def task_loss(schema: DatasetSchema, name: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    kind = schema.task(name).type
    if kind == "binary":
        return F.binary_cross_entropy_with_logits(out.float(), target)
    if kind == "multiclass":
        return F.cross_entropy(out.float(), target)
    return F.mse_loss(out.float(), target)


def make_stepper(
    model: torch.nn.Module,
    schema: DatasetSchema,
    *,
    optimizer: str,
    lr: float,
    weight_decay: float,
    batch_size: int,
    device: torch.device,
    compile_: bool = False,
    bf16: bool = False,
    fused: bool = True,
    cuda_graph: bool = False,
) -> Callable[[int], float]:
    """-> run(steps) -> training samples/s over `steps` steps (after the caller's warm-up). On CPU the model
    gets the chunked kernels swapped in, as training does (accelerate_cpu)."""
    model.to(device).train()
    if device.type == "cpu":
        accelerate_cpu(model)
    opt_cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    graph = cuda_graph and device.type == "cuda" and not hasattr(model, "training_loss")
    # A captured step needs an optimizer whose state stays on the device (capturable).
    extra = {"capturable": True} if graph else {}
    opt = opt_cls(model.parameters(), lr=lr, weight_decay=weight_decay, fused=fused or None, **extra)
    x_num, x_cat, y = random_batch(schema, batch_size, device)
    fwd = torch.compile(model) if compile_ else model

    def eager_step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if hasattr(model, "training_loss"):
                loss, _ = model.training_loss(x_num, x_cat, y, lambda k, o, t: task_loss(schema, k, o, t))
            else:
                out = fwd(x_num, x_cat)
                loss = sum(task_loss(schema, k, o, y[k]) for k, o in out.items())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step = eager_step
    if graph:
        # Whole-step CUDA graph (forward, backward, optimizer): one launch per batch instead of hundreds
        # of small kernels, which dominate at batch 2048. Inputs stay in static tensors.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                out = fwd(x_num, x_cat)
                loss = sum(task_loss(schema, k, o, y[k]) for k, o in out.items())
            loss.backward()
            opt.step()
        step = g.replay

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run(steps: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return steps * batch_size / (time.perf_counter() - t0)

    return run
