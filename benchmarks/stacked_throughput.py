"""Training throughput of M separate runs against one stacked run of M members (multitab.training.stacked),
for every Figure 5/6 model at the MultiTab-Bench shapes: 32 numerical features, 7 regression tasks, batch
2048, the authors' MultiTab-Bench hyperparameters (hparams/authors/multitab_bench/, protocol paper).

Measured in one run, on one machine, with the training code itself: the M seeds trained one after another
with `loop.train` (as the pipeline trains them, each on all --threads), then the same M seeds with
`train_stacked`, both over the same synthetic rows for --epochs epochs. Reported: training samples per
second of the optimisation loop (validation and checkpoints left out, as in metrics.json's
`samples_per_second`), summed over the members (M x rows / wall time of the M loops), taken from the last
epoch (the first pays one-off allocation costs), and the speed-up stacked / separate.
On CPU the stacked step runs the reference ops under vmap (not the chunked CPU kernels that separate
runs use), and MultiTab-Net's CPU flash attention has no batching rule (vmap loops over the members).

Run:  flock /tmp/multitab-bench.lock python benchmarks/stacked_throughput.py [--members 3] [--rows 65536]
      [--epochs 2] [--threads 2] [--models stl_mlp mmoe ...] [--out results/benchmarks/stacked_throughput_cpu.json]
Timings taken while other jobs share the CPU are low: say so when quoting them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from multitab.hparams import load
from multitab.models import build_model
from multitab.runtime.provenance import cpu_model, git_commit, machine
from multitab.training.compute_mode import computing
from multitab.training.data import load_processed
from multitab.training.device import resolve_device, seed_everything
from multitab.training.loop import train
from multitab.training.settings import RunSettings
from multitab.training.stacked import StackMember, seeded, train_stacked

ROOT = Path(__file__).resolve().parents[1]
FIGURE_MODELS = ("stl_mlp", "mmoe", "ple", "stem", "multitab_net")
N_FEATURES, N_TASKS = 32, 7


def write_bench_like(path: Path, n_train: int, n_eval: int, seed: int = 0) -> None:
    """A processed MultiTab-Bench-shaped dataset: 32 numerical features, 7 regression tasks."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    features = [{"name": f"x{i}", "kind": "numerical", "cardinality": None} for i in range(N_FEATURES)]
    tasks = [{"name": f"y{i}", "type": "regression", "n_classes": None} for i in range(N_TASKS)]
    n_rows = {"train": n_train, "val": n_eval, "test": n_eval}
    weights = rng.standard_normal((N_FEATURES, N_TASKS)).astype(np.float32) / np.sqrt(N_FEATURES)
    for split, n in n_rows.items():
        x = rng.standard_normal((n, N_FEATURES), dtype=np.float32)
        y = np.tanh(x @ weights) + 0.1 * rng.standard_normal((n, N_TASKS), dtype=np.float32)
        cols = {f["name"]: x[:, i] for i, f in enumerate(features)}
        cols |= {t["name"]: y[:, j].astype(np.float32) for j, t in enumerate(tasks)}
        pd.DataFrame(cols).to_parquet(path / f"{split}.parquet", index=False)
    meta = {"dataset": "bench_like", "features": features, "tasks": tasks, "source": "synthetic", "standin": False,
            "n_rows": n_rows, "target_stats": {t["name"]: {"mean": 0.0, "std": 1.0} for t in tasks}, "inputs": {}}
    (path / "meta.json").write_text(json.dumps(meta))


def measure(name: str, data_path: Path, work: Path, members: int, settings: RunSettings) -> dict[str, Any]:
    h = load("multitab_bench", name, root=ROOT)
    seeds = list(range(members))
    separate_seconds = 0.0
    n_train = 0
    for seed in seeds:
        data = load_processed(data_path)
        n_train = len(data.splits["train"])
        seed_everything(seed, settings.deterministic)
        model = build_model(name, data.meta, h.model)
        r = train(model, data, dataclasses.replace(settings, seed=seed), checkpoint_dir=work / name / "separate" /
                  f"seed{seed}", run_fingerprint=f"separate-{seed}")
        separate_seconds += n_train / r.history[-1]["samples_per_second"]
    data = load_processed(data_path)
    stack = []
    for seed in seeds:
        model, rng = seeded(seed, lambda: build_model(name, data.meta, h.model), settings.deterministic)
        stack.append(StackMember(seed, model, work / name / "stacked" / f"seed{seed}", f"stacked-{seed}", None, rng))
    results = train_stacked(stack, data, settings)
    stacked_rate = results[0].history[-1]["samples_per_second"]  # each member's share: M x rows / loop time
    separate_rate = members * n_train / separate_seconds
    n_params = sum(p.numel() for p in stack[0].model.parameters())
    return {"model": name, "n_params": n_params, "separate_samples_per_second": round(separate_rate, 1),
            "stacked_samples_per_second": round(stacked_rate, 1), "speedup": round(stacked_rate / separate_rate, 3),
            **({"cuda_graph": {"separate": r.cuda_graph, "stacked": results[0].cuda_graph}}
               if settings.cuda_graph else {})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(FIGURE_MODELS), choices=FIGURE_MODELS)
    p.add_argument("--members", type=int, default=3, help="M: seeds per stack (and separate runs)")
    p.add_argument("--rows", type=int, default=16 * 2048, help="training rows (an epoch)")
    p.add_argument("--epochs", type=int, default=2, help="the last epoch is reported")
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--cuda-graph", action="store_true",
                   help="train.cuda_graph: full batches replay a captured step (CUDA only; on CPU trains uncaptured)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    device = resolve_device(a.device)
    settings = RunSettings(seed=0, max_epochs=a.epochs, patience=a.epochs + 1, batch_size=a.batch_size,
                           optimizer="adam", lr=1e-3, weight_decay=1e-5, device=a.device,  # protocol paper's optimiser
                           precision="fp32", compile=False, deterministic=True, progress=sys.stderr.isatty(),
                           early_stopping_smoothing=None, on_step=None, cuda_graph=a.cuda_graph)
    res: dict[str, Any] = {
        "commit": git_commit(ROOT),
        "cpu": cpu_model(), "machine": machine(), "device": str(device), "threads": a.threads,
        "torch": torch.__version__, "members": a.members, "rows": a.rows, "epochs": a.epochs,
        "batch_size": a.batch_size, "features": N_FEATURES, "tasks": N_TASKS, "cuda_graph": a.cuda_graph,
        "load_note": "machine shared with other jobs unless stated otherwise", "models": [],
    }
    if device.type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(device)
    with tempfile.TemporaryDirectory() as tmp:
        write_bench_like(Path(tmp) / "data", a.rows, a.batch_size)
        for name in a.models:
            # as a run of the pipeline computes (training/compute_mode.py): on CUDA the deterministic kernels,
            # and the record says whether any op was not
            with computing(device, settings.precision, settings.deterministic) as mode:
                row = measure(name, Path(tmp) / "data", Path(tmp) / "runs", a.members, settings)
            row.update({k: v for k, v in mode.record().items() if k in ("deterministic", "nondeterministic_ops")})
            res["models"].append(row)
            print(f"{name:14s} {row['n_params']:>10,d} params  separate {row['separate_samples_per_second']:>10,.0f}  "
                  f"stacked {row['stacked_samples_per_second']:>10,.0f} samples/s  x{row['speedup']:.2f}", flush=True)
    print(f"{res['cpu']} ({res['machine']}), {a.threads} threads, {a.members} members, torch {res['torch']}")
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
