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
from pathlib import Path
from typing import Any

import torch

from multitab.datasets.schema import SCHEMAS, DatasetSchema
from multitab.hparams import BENCH, load
from multitab.models import MODELS, build_model
from multitab.runtime.cpu import tune_cpu_runtime

# siblings of this script, not packages: the timed training step, and the --bench-shapes mode (bench_accuracy is
# here for the tests, which read it from this script)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_shapes import bench_accuracy, bench_shapes  # noqa: E402, F401
from _throughput_step import make_stepper  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]  # the project: its hparams/ folder

AUTHORS_HIGGS = {"per_sample_mixing": 5918.0, "attention": 3443.0}
TARGETS_CPU = {"per_sample_mixing": 2.0, "attention": 1.3}  # x the authors' figure


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


if __name__ == "__main__":
    sys.exit(main())
