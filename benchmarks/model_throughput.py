"""Training throughput (samples/s) of every registered model at each dataset's selected configuration.

One step = forward + backward + optimizer step on one batch (default 2048, float32) of random inputs
shaped by the dataset's schema, with the authors' optimizer (Adam / AdamW) and the plain sum of task
losses. Reported: median over --repeats timings of --steps steps after --warmup steps. On CPU the
thread count is --threads (default 2, the authors' measurement setting); on CUDA optional
--compile (torch.compile) and --bf16 (autocast) are available.

Reference (docs/deviations.md, "Speed reference"; same CPU, 2 threads, batch 2048): the authors' MultiTab-Net at
the Higgs selected configuration trains 5,918 samples/s (their `rope` path = our per_sample_mixing)
and 3,443 samples/s with true inter-sample attention.

Run:  PYTHONPATH=src:benchmarks flock /tmp/multitab-bench.lock python benchmarks/model_throughput.py [--datasets higgs]
      [--models multitab_net saint] [--device cuda --compile --bf16] [--out results/benchmarks/x.json]

`--bench-shapes`: the MultiTab-Bench study's shapes on CPU, 1 thread per run as the study runs (32
numerical features, 7 regression tasks, batch 2048, the authors' multitab_bench_example settings under
protocol "paper"): fp32 vs bf16-autocast training samples/s of STL, MMoE, PLE, STEM and MultiTab-Net timed
alternately, then short run_training runs in both precisions (test EV, and the share of wall time spent in
the optimisation loop, the data path, validation and the rest).
      python benchmarks/model_throughput.py --bench-shapes --out results/benchmarks/bench_shapes_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from multitab.datasets.schema import SCHEMAS, DatasetSchema
from multitab.hparams import BENCH, load
from multitab.models import MODELS, build_model
from multitab.models.accelerate import accelerate_cpu
from multitab.runtime.cpu import tune_cpu_runtime
from multitab.runtime.provenance import cpu_model

ROOT = Path(__file__).resolve().parents[1]  # the project: its hparams/ folder

AUTHORS_HIGGS = {"per_sample_mixing": 5918.0, "attention": 3443.0}
TARGETS_CPU = {"per_sample_mixing": 2.0, "attention": 1.3}  # x the authors' figure


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


def measure(
    name: str,
    schema: DatasetSchema,
    *,
    batch_size: int,
    device: torch.device,
    warmup: int,
    steps: int,
    repeats: int,
    compile_: bool = False,
    bf16: bool = False,
    cuda_graph: bool = False,
    overrides: dict[str, Any] | None = None,
) -> float | None:
    """Median training samples/s, or None for models that are not torch modules (XGBoost)."""
    torch.manual_seed(0)
    hp = load(schema.name if schema.name in SCHEMAS else BENCH, name, protocol="authors_code", root=ROOT)
    model = build_model(name, schema, {**hp.model, **(overrides or {})})
    if not isinstance(model, torch.nn.Module):
        return None
    cfg = hp.optim or {}
    run = make_stepper(model, schema, optimizer=cfg["optimizer"], lr=cfg["lr"], weight_decay=cfg["weight_decay"],
                       batch_size=batch_size, device=device, compile_=compile_, bf16=bf16,
                       cuda_graph=cuda_graph)
    run(warmup)
    return statistics.median(run(steps) for _ in range(repeats))


def compare_with_authors_style(
    mode: str, *, batch_size: int, device: torch.device, warmup: int, steps: int, repeats: int,
    compile_: bool = False, bf16: bool = False, cuda_graph: bool = False,
) -> tuple[float, float]:
    """(ours, authors-style) median samples/s for MultiTab-Net at the Higgs selected configuration,
    timed alternately in one run. The authors-style model uses their optimizer as they do (AdamW,
    foreach); ours uses the fused AdamW kernel."""
    from authors_reference import AuthorsStyleMultiTabNet

    schema = SCHEMAS["higgs"]
    hp = load("higgs", "multitab_net", protocol="authors_code", root=ROOT)
    cfg = hp.optim or {}
    torch.manual_seed(0)
    ours = build_model("multitab_net", schema, {**hp.model, "inter_sample": mode})
    ref = AuthorsStyleMultiTabNet(schema, rope=mode == "per_sample_mixing")
    kw = dict(optimizer=cfg["optimizer"], lr=cfg["lr"], weight_decay=cfg["weight_decay"], batch_size=batch_size,
              device=device, bf16=bf16)
    run_ours = make_stepper(ours, schema, compile_=compile_, cuda_graph=cuda_graph, **kw)  # type: ignore[arg-type]
    run_ref = make_stepper(ref, schema, fused=False, **kw)  # type: ignore[arg-type]
    run_ours(warmup)
    run_ref(warmup)
    a, b = [], []
    for _ in range(repeats):
        a.append(run_ours(steps))
        b.append(run_ref(steps))
    return statistics.median(a), statistics.median(b)


BENCH_MODELS = ["stl_mlp", "mmoe", "ple", "stem", "multitab_net"]


def bench_schema(name: str = "p06_pd3_t7", n_tasks: int = 7) -> DatasetSchema:
    """A MultiTab-Bench dataset's schema: 32 numerical features, `n_tasks` regression tasks."""
    from multitab.datasets.schema import schema_from_meta

    return schema_from_meta({
        "dataset": name,
        "features": [{"name": f"x{i:02d}", "kind": "numerical", "cardinality": None} for i in range(32)],
        "tasks": [{"name": f"y{i + 1}", "type": "regression", "n_classes": None} for i in range(n_tasks)],
    })


def bench_throughput(models: list[str], *, batch_size: int, warmup: int, steps: int, repeats: int
                     ) -> dict[str, dict[str, float]]:
    """fp32 and bf16-autocast training samples/s of each model on the MultiTab-Bench shapes (p06_pd3_t7:
    7 tasks; the authors' multitab_bench_example settings under protocol "paper"), both built from the
    same seed and timed alternately in this run, so the ratio is not skewed by a load change."""
    schema = bench_schema()
    device = torch.device("cpu")
    out: dict[str, dict[str, float]] = {}
    for name in models:
        runs = {}
        for precision in ("fp32", "bf16"):
            torch.manual_seed(0)
            hp = load(BENCH, name, protocol="paper", root=ROOT)
            model = build_model(name, schema, hp.model)
            cfg = hp.optim or {}
            runs[precision] = make_stepper(model, schema, optimizer=cfg["optimizer"], lr=cfg["lr"],
                                           weight_decay=cfg["weight_decay"], batch_size=batch_size, device=device,
                                           bf16=precision == "bf16")
            runs[precision](warmup)
        rates: dict[str, list[float]] = {"fp32": [], "bf16": []}
        for _ in range(repeats):
            for precision, run in runs.items():
                rates[precision].append(run(steps))
        fp32, bf16 = statistics.median(rates["fp32"]), statistics.median(rates["bf16"])
        out[name] = {"fp32_samples_per_second": round(fp32), "bf16_samples_per_second": round(bf16),
                     "bf16_over_fp32": round(bf16 / fp32, 3)}
        print(f"{name:14s} fp32 {fp32:9,.0f}  bf16 {bf16:9,.0f} samples/s  bf16/fp32 {bf16 / fp32:.2f}", flush=True)
    return out


def bench_accuracy(models: list[str], *, n_samples: int, epochs: int, batch_size: int) -> dict[str, Any]:
    """Short training runs through run_training (the study's path: deterministic, 1 thread, batch
    `batch_size`) on a generated p06_pd3_t7 dataset in fp32 and in bf16: test EV (mean over tasks), and
    where an epoch's wall time goes (optimisation loop, data path inside it, validation pass; the rest of
    the run: start-up, checkpoint writes, the test pass)."""
    import tempfile
    from dataclasses import replace

    from multitab.config import load_params
    from multitab.datasets.bench import synthesize_config, write_dataset
    from multitab.hparams import for_run, selection_file
    from multitab.runs.profiles import group_train
    from multitab.runs.resolve import settings_for
    from multitab.training.run import RunSpec, run_training

    root = Path(__file__).resolve().parents[1]
    loaded = load_params(root / "params.yaml")
    base = group_train(loaded, loaded.study.group)
    bench = replace(loaded.bench, data=replace(loaded.bench.data, n_samples=n_samples))
    out: dict[str, Any] = {"dataset": "p06_pd3_t7", "n_samples": n_samples, "epochs": epochs, "batch_size": batch_size,
                           "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        frames, meta = synthesize_config("p06_pd3_t7", bench)
        write_dataset(folder / "p06_pd3_t7", frames, meta)
        for name in models:
            for precision in ("fp32", "bf16"):
                cfg = replace(base, max_epochs=epochs, batch_size=batch_size, num_threads=1, device="cpu",
                              precision=precision, progress=False)  # type: ignore[arg-type]
                spec = RunSpec("p06_pd3_t7", name, 0, folder / "p06_pd3_t7", folder / "ckpt" / name / precision)
                hp = for_run(root, selection_file("authors", BENCH, name), model=name, dataset="p06_pd3_t7",
                             point=None, config=cfg)  # the study's hyperparameters, as study_cost.py resolves them
                t0 = time.perf_counter()
                record, history = run_training(spec, settings_for(cfg, hp, model=name, dataset="p06_pd3_t7"))
                wall = time.perf_counter() - t0
                n_train = record["n_rows"]["train"]
                loop = sum(n_train / h["samples_per_second"] for h in history)
                epoch = sum(h["epoch_seconds"] for h in history)
                data = sum(h["data_seconds"] for h in history)
                out["runs"][f"{name}/{precision}"] = {
                    "test_ev_mean": record["test_mean"], "samples_per_second": record["samples_per_second"],
                    "wall_seconds": round(wall, 2), "loop_share": round(loop / wall, 3),
                    "data_share": round(data / wall, 3), "validation_share": round((epoch - loop) / wall, 3),
                    "rest_share": round((wall - epoch) / wall, 3),
                }
                r = out["runs"][f"{name}/{precision}"]
                print(f"{name:14s} {precision}: test EV {record['test_mean']:.4f}, {record['samples_per_second']:,.0f} "
                      f"samples/s, wall {wall:.1f} s = loop {r['loop_share']:.0%} (data {r['data_share']:.1%}) + "
                      f"validation {r['validation_share']:.0%} + rest {r['rest_share']:.0%}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=sorted(SCHEMAS))
    p.add_argument("--models", nargs="*", default=None, help="default: every registered model")
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--cuda-graph", action="store_true", help="capture the whole training step as a CUDA graph")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc malloc at its defaults (to measure what keeping freed memory gains)")
    p.add_argument("--skip-higgs-check", action="store_true", help="skip the MultiTab-Net Higgs comparison")
    p.add_argument("--higgs-modes", nargs="*", default=list(AUTHORS_HIGGS), choices=list(AUTHORS_HIGGS),
                   help="inter_sample modes of the MultiTab-Net Higgs comparison (default: both)")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    p.add_argument("--bench-shapes", action="store_true",
                   help="MultiTab-Bench study shapes on CPU, 1 thread: fp32 vs bf16 throughput of the study's "
                        "models, then short runs' test EV in both (--bench-n-samples, --bench-epochs)")
    p.add_argument("--bench-n-samples", type=int, default=20_000)
    p.add_argument("--bench-epochs", type=int, default=3, help="0: no short runs")
    p.add_argument("--bench-run-batch", type=int, default=None,
                   help="batch size of the short runs (default --batch-size; 128, the bench profile's, learns in "
                        "3 epochs where 2048 leaves the expert models on their initial plateau)")
    p.add_argument("--bench-no-throughput", action="store_true", help="only the short runs")
    args = p.parse_args(argv)
    if args.bench_shapes:
        return bench_shapes(args)

    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.set_num_threads(args.threads)
    # As training does (multitab/runtime.py): denormals flushed, freed memory kept by malloc. Process-wide,
    # so the authors-style model timed in the same run gets both too.
    if args.default_malloc:
        torch.set_flush_denormal(True)
    else:
        tune_cpu_runtime()
    kw = dict(
        batch_size=args.batch_size, device=device, warmup=args.warmup, steps=args.steps,
        repeats=args.repeats, compile_=args.compile, bf16=args.bf16, cuda_graph=args.cuda_graph,
    )
    print(f"device={device} threads={torch.get_num_threads()} batch={args.batch_size} "
          f"compile={args.compile} bf16={args.bf16} torch={torch.__version__}")
    results: dict[str, Any] = {"device": str(device), "threads": args.threads, "batch_size": args.batch_size,
                               "compile": args.compile, "bf16": args.bf16,
                               "malloc_keeps_freed_memory": not args.default_malloc,
                               "torch": torch.__version__, "load_average": list(os.getloadavg()),
                               "rates": {}, "higgs_check": {}}
    models = args.models or list(MODELS)
    for ds in args.datasets:
        for name in models:
            rate = measure(name, SCHEMAS[ds], **kw)  # type: ignore[arg-type]
            results["rates"][f"{ds}/{name}"] = rate
            print(f"{ds:12s} {name:18s} " + ("n/a (not a torch model)" if rate is None else f"{rate:12,.0f} samples/s"),
                  flush=True)
    if not args.skip_higgs_check:
        for mode in args.higgs_modes:
            ref = AUTHORS_HIGGS[mode]
            rate, rate_ref = compare_with_authors_style(mode, **kw)  # type: ignore[arg-type]
            ratio, ratio_run = rate / ref, rate / rate_ref
            results["higgs_check"][mode] = {"samples_per_s": rate, "authors_published": ref, "ratio": ratio,
                                            "authors_style_same_run": rate_ref, "ratio_same_run": ratio_run,
                                            "cpu_target_ratio": TARGETS_CPU[mode]}
            print(f"MultiTab-Net higgs inter_sample={mode:18s} {rate:10,.0f} samples/s = {ratio:.2f}x the "
                  f"authors' {ref:,.0f}; authors-style model in this run {rate_ref:10,.0f} -> {ratio_run:.2f}x "
                  f"(CPU target >= {TARGETS_CPU[mode]}x)", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2))
        tmp.replace(args.out)
    return 0


def bench_shapes(args: argparse.Namespace) -> int:
    torch.set_num_threads(1)  # the study runs one training per core
    tune_cpu_runtime()
    models = args.models or BENCH_MODELS
    cpu = cpu_model()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    results: dict[str, Any] = {
        "mode": "bench-shapes", "device": "cpu", "threads": 1, "batch_size": args.batch_size, "cpu": cpu,
        "amx_bf16": "amx_bf16" in flags, "cores": os.cpu_count(), "torch": torch.__version__,
        "load_average_before": list(os.getloadavg()),
    }
    if not args.bench_no_throughput:
        results["throughput"] = bench_throughput(models, batch_size=args.batch_size, warmup=args.warmup,
                                                 steps=args.steps, repeats=args.repeats)
    if args.bench_epochs > 0:
        results["accuracy"] = bench_accuracy(models, n_samples=args.bench_n_samples, epochs=args.bench_epochs,
                                             batch_size=args.bench_run_batch or args.batch_size)
    results["load_average_after"] = list(os.getloadavg())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2) + "\n")
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
