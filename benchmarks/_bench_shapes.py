"""benchmarks/model_throughput.py --bench-shapes: the MultiTab-Bench study's shapes on CPU, 1 thread per run
as the study runs, fp32 against bf16-autocast training samples/s of the study's models timed alternately
(`bench_throughput`), then short run_training runs in both precisions (`bench_accuracy`). A module beside
the script, not a script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from _throughput_step import make_stepper
from multitab.datasets.schema import DatasetSchema
from multitab.hparams import BENCH, load
from multitab.models import build_model
from multitab.runtime.cpu import tune_cpu_runtime
from multitab.runtime.provenance import cpu_model

ROOT = Path(__file__).resolve().parents[1]  # the project: its hparams/ folder

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
