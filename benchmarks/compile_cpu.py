"""Does `torch.compile` speed up the study's training steps on this CPU? Eager against compiled (inductor, the
default backend) training steps of each Figure 5/6 model at the MultiTab-Bench shapes, one process, one thread.

The project's `train.compile` is CUDA-only (multitab.training.loop); this script measures whether a CPU path
would pay. For one study configuration (default: the study's first with the most tasks, t = 7; 32 numerical
features) it synthesises a dataset (the study's generator) and takes one training batch (`--batch`, default
the study's 2,048 rows) with its real targets. Per model it builds the model twice from the same seed (the
study's hyperparameters, `protocol` of params.yaml), one eager and one `torch.compile(model, dynamic=False)`,
each with its own Adam, and times full training steps (forward, the project's multitask loss, backward,
optimiser step):

- `compile_seconds`: the compiled model's first step (tracing and code generation) minus an eager step, with
  an empty inductor cache (a fresh `TORCHINDUCTOR_CACHE_DIR`: a warm cache from an earlier run would hide it);
- `eager_step_seconds`, `compiled_step_seconds`: medians of `--steps` steps after `--warmup` steps, the two
  timed in alternation (eager, compiled, eager, ...), so that load from other jobs falls on both alike;
- `speedup`: eager over compiled (above 1: compiled is faster), and `break_even_steps`: the steps the compile
  time takes to pay back (None when it never does);
- `first_loss_rel_diff`: |compiled - eager| / |eager| of the first step's loss, from the same weights: the
  compiled path computes the same function (a reordered sum differs in the last bits only).

Run:  flock /tmp/multitab-bench.lock python benchmarks/compile_cpu.py [--config p06_pd3_t7]
      [--models stl_mlp ...] [--batch 2048] [--steps 15] [--out results/benchmarks/compile_cpu.json]
Timings taken while other jobs share the CPU are high; the ratio is taken in alternation, but say so when
quoting it (the output records the load average).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from multitab.config import load_params
from multitab.datasets.bench import synthesize_config
from multitab.datasets.schema import schema_from_meta
from multitab.hparams import BENCH, load
from multitab.models import build_model
from multitab.runs.profiles import group_train, profiled
from multitab.runtime.provenance import cpu_model
from multitab.training.data import split_from_frame_arrays
from multitab.training.losses import MultitaskLoss

ROOT = Path(__file__).resolve().parents[1]

Step = Callable[[], float]


def training_step(forward: Callable[..., Any], optimizer: torch.optim.Optimizer, loss_fn: MultitaskLoss,
                  inputs: tuple[torch.Tensor, ...], targets: dict[str, torch.Tensor]) -> Step:
    """One training step as the project's loop takes it (zero_grad, forward, summed task losses, backward,
    optimiser step), returning the loss."""
    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss, _ = loss_fn(forward(*inputs), targets)
        loss.backward()
        optimizer.step()
        return float(loss.detach())
    return step


def compare(eager: Step, compiled: Step, *, warmup: int, steps: int) -> dict[str, Any]:
    """Time `eager` and `compiled` (two models from the same weights) as the docstring says."""
    t0 = time.perf_counter()
    loss_eager = eager()
    first_eager = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss_compiled = compiled()
    first_compiled = time.perf_counter() - t0
    for _ in range(warmup):
        eager()
        compiled()
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(steps):
        for name, step in (("eager", eager), ("compiled", compiled)):
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    e, c = statistics.median(times["eager"]), statistics.median(times["compiled"])
    compile_seconds = max(first_compiled - first_eager, 0.0)
    return {
        "compile_seconds": round(compile_seconds, 2),
        "eager_step_seconds": round(e, 6), "compiled_step_seconds": round(c, 6),
        "speedup": round(e / c, 3),
        "break_even_steps": round(compile_seconds / (e - c)) if e > c else None,
        "first_loss_rel_diff": abs(loss_compiled - loss_eager) / max(abs(loss_eager), 1e-12),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--params", default=str(ROOT / "params.yaml"))
    p.add_argument("--config", default=None, help="a study configuration (default: the first with the most tasks)")
    p.add_argument("--models", nargs="+", default=None, help="default: the study group's models")
    p.add_argument("--batch", type=int, default=None, help="rows per step (default: the study's batch size)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=15, help="timed steps per path (>= 1)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--out", type=Path, default=ROOT / "results/benchmarks/compile_cpu.json")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be at least 1")
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # cold compile: no kernels from earlier runs
        try:
            return measure(p, a)
        finally:
            if before is None:
                del os.environ["TORCHINDUCTOR_CACHE_DIR"]
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def measure(p: argparse.ArgumentParser, a: argparse.Namespace) -> int:

    raw = load_params(a.params)
    study = raw.study
    config = group_train(raw, study.group)
    batch = a.batch or config.batch_size
    raw = raw.replace(study=dataclasses.replace(study, data={**study.data, "n_samples": max(2 * batch, 1000)}))
    params = profiled(raw, "study")
    threads = max(config.num_threads, 1)
    torch.set_num_threads(threads)
    models = a.models or list(raw.group(study.group).models)
    n_tasks = {c: raw.bench.configs[c].n_tasks for c in study.configs}
    name = a.config or max(study.configs, key=lambda c: n_tasks[c])
    if name not in raw.bench.configs:
        p.error(f"--config {name!r} is not a key of bench.configs in {a.params}")

    frames, meta = synthesize_config(name, params.bench)
    schema = schema_from_meta(meta)
    train = frames["train"].iloc[:batch]
    split = split_from_frame_arrays(schema, {c: train[c].to_numpy() for c in schema.canonical_columns}, "train")
    x_num, x_cat, targets = split.x_num, split.x_cat, split.targets()
    loss_fn = MultitaskLoss(schema.tasks)
    load0 = os.getloadavg()[0]
    protocol = params.protocol
    results: dict[str, Any] = {}
    for model in models:
        hp = load(BENCH, model, protocol=protocol, root=ROOT).model
        built = []
        for _ in range(2):
            torch.manual_seed(0)
            built.append(build_model(model, schema, hp).train())
        eager_model, compiled_model = built
        compiled_forward = torch.compile(compiled_model, dynamic=False, backend=a.backend)
        steps = [training_step(fwd, torch.optim.Adam(m.parameters(), lr=1e-3), loss_fn, (x_num, x_cat), targets)
                 for fwd, m in ((eager_model, eager_model), (compiled_forward, compiled_model))]
        results[model] = compare(*steps, warmup=a.warmup, steps=a.steps)
        r = results[model]
        print(f"{model}: eager {r['eager_step_seconds']:.3f} s/step, compiled {r['compiled_step_seconds']:.3f} "
              f"s/step (x{r['speedup']:.2f}), compile {r['compile_seconds']:.1f} s, first-loss rel. diff "
              f"{r['first_loss_rel_diff']:.1e}", flush=True)
        torch._dynamo.reset()
    out = {
        "what": "eager vs torch.compile training steps per model at the study's shapes; see the docstring",
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs", "cpu": cpu_model(),
        "torch": torch.__version__, "backend": a.backend, "threads": threads, "config": name,
        "n_tasks": raw.bench.configs[name].n_tasks, "batch_size": batch, "warmup": a.warmup, "steps": a.steps,
        "protocol": params.protocol,
        "load_average_at_start": load0, "load_average_at_end": os.getloadavg()[0],
        "models": results,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
