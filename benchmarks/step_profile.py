"""Where a training run's time goes, per Figure 5/6 model at the MultiTab-Bench shapes: the measured reason
why a model's training stays below the machine's best matrix-product rate (benchmarks/study_cost.py's
`fraction_of_peak`).

For one study configuration (default: the study's first with the most tasks, t = 7; 32 numerical features,
batch 2048) this script synthesises the dataset at `--samples` rows (the study's generator) and, per model,
trains it three times through `multitab.training.run_training` (the train stage's own code, the study's settings,
`train.num_threads` threads) for `--epochs` epochs: once plain, for the epoch time, once under
torch.profiler (CPU), for where that time goes, and once under torch.profiler with FLOP counting, for the
matrix products' rate. Reported per model:

- `seconds_per_epoch` (plain run: the median of the epochs after the first, validation and checkpoints
  included) and `fraction_of_peak`: the epoch's arithmetic by the Table 4 counter (3 F per training row,
  F per validation row, as study_cost.py counts it) per second, over `matmul_best` (the best rate of
  study_cost.py's matrix products of the models' own shapes, measured in the same process);
- `share`: the profiled run's operator time (self CPU time of every recorded op, the whole run: epochs,
  validation, test evaluation) split by kind: `matmul` (aten mm / addmm / bmm / baddbmm), `attention`
  (fused scaled-dot-product kernels), `elementwise` (activations, arithmetic, dropout, losses, masks),
  `normalization` (batch / layer norm), `memory` (copies, concatenation, indexing, allocation, views),
  `reduction` (sums, means, norms), `other` (everything else, e.g. the Python bodies of custom autograd
  functions); and by phase: `forward` (everything outside the two below: training and evaluation forward,
  loss, data batches), `backward` (under the autograd engine), `optimizer` (under `Optimizer.step` /
  `zero_grad`);
- `matmul_rate_vs_best`: the FLOPs the profiler counts for the matmul ops over their own time, over
  `matmul_best`: how fast the models' products run at their own shapes (from a third run, profiled with
  FLOP counting, which adds time per op: a lower bound);
- `untraced_share`: the profiled run's wall time not inside any recorded op (Python between ops, the
  loop's bookkeeping), and `profiler_overhead` (the profiled run's epoch time over the plain run's: the
  profiler adds a fixed cost per op, so where it is well above 1 the many small ops' shares are high);
- `top_ops`: the ten ops with the most self time (name, kind, share).

So a model below the rate either spends its time outside matrix products (`share` other than matmul and
attention, `untraced_share`) or runs its products below the rate at its shapes (`matmul_rate_vs_best`).

Run:  flock /tmp/multitab-bench.lock python benchmarks/step_profile.py [--config p06_pd3_t7]
      [--samples 20000] [--epochs 3] [--models stl_mlp ...] [--precision fp32|bf16]
      [--out results/benchmarks/step_profile_cpu.json]
Timings taken while other jobs share the CPU are high, and shares shift: say so when quoting them (the
output records the load average).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from multitab.config import load_params  # noqa: E402
from multitab.datasets.bench import synthesize_config, write_dataset  # noqa: E402
from multitab.datasets.schema import schema_from_meta  # noqa: E402
from multitab.hparams import BENCH, for_run, selection_file  # noqa: E402
from multitab.runs.profiles import group_train, profiled  # noqa: E402
from multitab.runs.resolve import settings_for  # noqa: E402
from multitab.runtime.provenance import cpu_model  # noqa: E402
from multitab.training.run import RunSpec, run_training  # noqa: E402
from study_cost import forward_flops, matmul_peak  # noqa: E402

KINDS = ("matmul", "attention", "elementwise", "normalization", "memory", "reduction", "other")
PHASES = ("forward", "backward", "optimizer")

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_addmm_activation"}
_MEMORY = {"copy_", "clone", "contiguous", "cat", "stack", "index", "index_select", "gather", "scatter",
           "scatter_", "scatter_add_", "index_put_", "_index_put_impl_", "index_add_", "_to_copy", "to",
           "empty", "empty_strided", "empty_like", "resize_", "repeat", "repeat_interleave", "narrow_copy",
           "_unsafe_index", "transpose", "permute", "view", "reshape", "_reshape_alias", "expand", "as_strided",
           "t", "slice", "select", "unsqueeze", "squeeze", "split", "split_with_sizes", "chunk", "unbind",
           "flatten", "detach", "detach_", "alias", "unfold", "zeros", "ones", "full", "zeros_like",
           "ones_like", "full_like", "new_zeros", "new_empty", "new_empty_strided", "narrow", "lift_fresh",
           "_unsafe_view", "movedim", "masked_select", "nonzero", "roll", "flip", "tensor_split", "numpy_T",
           "set_", "constant_pad_nd", "pad", "_local_scalar_dense", "item", "randperm", "arange"}
_REDUCTION = {"sum", "mean", "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "amax",
              "amin", "max", "min", "argmax", "argmin", "prod", "cumsum", "logsumexp", "all", "any",
              "_foreach_norm", "aminmax", "count_nonzero"}


def kind_of(name: str) -> str:
    """The kind of an op by its profiler name (aten::<op>); anything not listed is `other`."""
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if not name.startswith("aten::"):
        return "other"
    op = name[len("aten::"):]
    if op in _MATMUL:
        return "matmul"
    if "batch_norm" in op or "layer_norm" in op or "group_norm" in op:
        return "normalization"
    if op in _MEMORY:
        return "memory"
    if op in _REDUCTION:
        return "reduction"
    return "elementwise"  # the remaining aten ops are pointwise: arithmetic, activations, dropout, losses, masks


def phase_of(event: Any) -> str:
    """`optimizer` under Optimizer.step / zero_grad, `backward` under the autograd engine, else `forward`."""
    node = event
    while node is not None:
        name = node.name
        if name.startswith("Optimizer."):
            return "optimizer"
        if name.startswith("autograd::engine::evaluate_function"):
            return "backward"
        node = node.cpu_parent
    return "forward"


def breakdown(events: Any, wall_us: float) -> dict[str, Any]:
    """Self time by kind and phase, the matmul ops' counted FLOPs and time, and the top ops."""
    by_kind: dict[str, float] = defaultdict(float)
    by_phase: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    mm_flops = mm_us = 0.0
    for e in events:
        us = float(e.self_cpu_time_total)
        if us <= 0:
            continue
        kind = kind_of(e.name)
        by_kind[kind] += us
        by_phase[phase_of(e)] += us
        by_op[e.name] += us
        if kind == "matmul":
            mm_us += us
            mm_flops += float(getattr(e, "flops", 0) or 0)
    total = sum(by_kind.values())
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:10]
    return {
        "op_seconds": round(total / 1e6, 3),
        "share": {k: round(by_kind[k] / total, 4) for k in KINDS},
        "phase_share": {p: round(by_phase[p] / total, 4) for p in PHASES},
        "untraced_share": round(max(0.0, wall_us - total) / wall_us, 4),
        "matmul_flops": mm_flops,
        "matmul_seconds": mm_us / 1e6,
        "top_ops": [{"op": n, "kind": kind_of(n), "share": round(us / total, 4)} for n, us in top],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--params", default=str(ROOT / "params.yaml"))
    p.add_argument("--config", default=None, help="a study configuration (default: the first with the most tasks)")
    p.add_argument("--samples", type=int, default=20_000, help="samples of the synthesised dataset (70/15/15)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (>= 2: the first is warm-up)")
    p.add_argument("--models", nargs="+", default=None, help="default: the study group's models")
    p.add_argument("--precision", choices=["fp32", "bf16"], default=None, help="default: the study's (fp32)")
    p.add_argument("--out", type=Path, default=None, help="default results/benchmarks/step_profile_cpu.json")
    a = p.parse_args(argv)
    if a.epochs < 2:
        p.error("--epochs must be at least 2 (the first epoch is warm-up)")

    raw = load_params(a.params)
    study = raw.study
    raw = raw.replace(study=dataclasses.replace(study, data={**study.data, "n_samples": a.samples}))
    params = profiled(raw, "study")
    config = group_train(raw, study.group)
    config = replace(config, max_epochs=a.epochs, progress=False, device="cpu",
                     precision=a.precision or config.precision)
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    models = a.models or list(raw.group(study.group).models)
    n_tasks = {c: raw.bench.configs[c].n_tasks for c in study.configs}
    name = a.config or max(study.configs, key=lambda c: n_tasks[c])
    if name not in raw.bench.configs:
        p.error(f"--config {name!r} is not a key of bench.configs in {a.params}")
    out_path = a.out or ROOT / "results/benchmarks" / (
        "step_profile_cpu.json" if config.precision == "fp32" else f"step_profile_cpu_{config.precision}.json")

    load0 = os.getloadavg()[0]
    peak = matmul_peak(config.precision, config.num_threads)
    frames, meta = synthesize_config(name, params.bench)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_dataset(folder / name, frames, meta)
        schema = schema_from_meta(meta)
        for model in models:
            hp = for_run(ROOT, selection_file("authors", BENCH, model), model=model, dataset=name, point=None,
                         config=config)

            def run(tag: str, model: str = model, hp: Any = hp) -> tuple[dict[str, Any], list[dict[str, float]], float]:
                spec = RunSpec(name, model, 0, folder / name, folder / "ckpt" / tag / model)
                t0 = time.perf_counter()
                record, history = run_training(spec, settings_for(config, hp, model=model, dataset=name))
                return record, history, time.perf_counter() - t0

            record, history, wall = run("plain")
            per_epoch = statistics.median(float(h["epoch_seconds"]) for h in history[1:])
            # the shares from a plain profile (the least overhead per op); the matmul ops' FLOPs from a second
            # one with FLOP counting, which costs more per op (their time there is a little high)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                _, history_prof, wall_prof = run("profiled")
            per_epoch_prof = statistics.median(float(h["epoch_seconds"]) for h in history_prof[1:])
            parts = breakdown(prof.events(), wall_prof * 1e6)
            del parts["matmul_flops"], parts["matmul_seconds"]
            with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof_flops:
                run("flops")
            counted = breakdown(prof_flops.events(), 1.0)
            mm_rate = counted["matmul_flops"] / max(counted["matmul_seconds"], 1e-9)
            flops = forward_flops(schema, model, params.protocol, config.batch_size)
            epoch_flops = flops * (3 * record["n_rows"]["train"] + record["n_rows"]["val"])
            results[model] = {
                "seconds_per_epoch": round(per_epoch, 3), "run_wall_seconds": round(wall, 2),
                "fraction_of_peak": round(epoch_flops / per_epoch / peak["best"], 3),
                "matmul_rate_vs_best": round(mm_rate / peak["best"], 3),
                "profiler_overhead": round(per_epoch_prof / per_epoch, 3),
                **parts,
            }
            s = results[model]["share"]
            print(f"{model}: {per_epoch:.2f} s/epoch, {results[model]['fraction_of_peak']:.2f} of the best matmul "
                  f"rate; op time: matmul {s['matmul']:.0%}, attention {s['attention']:.0%}, elementwise "
                  f"{s['elementwise']:.0%}, normalization {s['normalization']:.0%}, memory {s['memory']:.0%}, "
                  f"reduction {s['reduction']:.0%}, other {s['other']:.0%}; untraced "
                  f"{results[model]['untraced_share']:.0%}; matmul ops at {results[model]['matmul_rate_vs_best']:.2f} "
                  "of the best rate", flush=True)
    out = {
        "what": "where a training run's time goes per model (torch.profiler self CPU time) and its share of the "
                "best matrix-product rate; see the docstring",
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs", "cpu": cpu_model(),
        "torch": torch.__version__, "precision": config.precision, "threads": config.num_threads,
        "config": name, "n_tasks": n_tasks[name] if name in n_tasks else raw.bench.configs[name].n_tasks,
        "samples": a.samples, "epochs": a.epochs, "batch_size": config.batch_size,
        "matmul_best_gflops": round(peak["best"] / 1e9, 1),
        "load_average_at_start": load0, "load_average_at_end": os.getloadavg()[0],
        "models": results,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
