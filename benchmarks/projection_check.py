"""One MultiTab-Bench configuration trained FOR REAL at N samples x every study model x S seeds, against the
projection `study_cost.py` makes for it from epochs measured at fewer samples: is the projection of the paper's
scale right (within 15 %)?

    python benchmarks/projection_check.py --device cuda --config p06_pd3_t3 --n-samples 1000000 --seeds 5 \
        --measure-samples 100000 --record results/study/multitab_bench_n100k_3seeds_cap40 --stack --cuda-graph

Steps, in one process on one device:
1. measure: study_cost's `measure` on the configuration at `--measure-samples` (`--measure-epochs` epochs per
   model; with `--stack` the seeds as one stacked run), and the stage start (a fresh interpreter's imports and
   the device's initialisation), as study_cost does;
2. project: per model, `run_seconds` x seeds at scale n_samples / measure_samples, twice: with the epochs of
   the study record (`--record`: the median over its seeds, the max for a stack; the record's training rows
   are stated, and whether they equal the real run's) and with the epochs the real run took (step 3), which
   checks the per-epoch cost model alone;
3. run: the configuration synthesised at `--n-samples` (not timed: the study's synthesize stage is its own),
   then every model's seeds trained as the study trains them (`runs.study.train` over `train`: the 40-epoch cap
   and early stopping, or `--max-epochs`), stacked when `--stack` and the model stacks, else one after another;
   the wall time of each model's training, plus one stage start per stage the DAG would run (one per stack,
   one per separate run: the in-process runs here do not pay it, the projection counts it), stated.
Output: per model the projected and real seconds, the epochs, and `ratio` = real / projected for both
projections, `within_15_percent` for each; the record names machine, device, torch, commit, precision (as
requested and as run), determinism (as run) and cuda_graph (what each run replayed).

A CPU dry run (`--device cpu --n-samples 2000 --measure-samples 1000 --seeds 2 --max-epochs 3`) checks the
script, not the projection: benchmarks/gpu_session.sh --dry-run runs it.
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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_cost as sc  # noqa: E402  (a sibling script, not a package)
from multitab.config import load_params  # noqa: E402
from multitab.datasets.bench import synthesize_config, write_dataset  # noqa: E402
from multitab.hparams import BENCH, for_run, selection_file  # noqa: E402
from multitab.runs.profiles import group_train, profiled  # noqa: E402
from multitab.runs.resolve import settings_for  # noqa: E402
from multitab.runtime.provenance import cpu_model, git_commit  # noqa: E402
from multitab.training.device import resolve_device  # noqa: E402
from multitab.training.run import RunSpec, run_training  # noqa: E402
from multitab.training.stacked import StackRefused, run_training_stacked  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.15


def projected_seconds(m: dict[str, float], epochs: list[float], scale: float, stage_start: float) -> float:
    """A model's projected seconds for runs with these `epochs` (one entry per seed; a stack's members each at
    the stack's epochs), from its measurement `m` (study_cost's keys)."""
    return sum(sc.run_seconds(m, e, scale, stage_start) for e in epochs)


def verdict(real: float, projected: float) -> dict[str, Any]:
    ratio = real / projected if projected > 0 else float("nan")
    return {"projected_seconds": round(projected, 1), "ratio": round(ratio, 3),
            "within_15_percent": bool(abs(ratio - 1.0) <= TOLERANCE)}


def train_for_real(params: Any, config: Any, name: str, model: str, seeds: int, folder: Path, stack: bool
                   ) -> dict[str, Any]:
    """Every seed of `model` on `name` as the study trains them; wall seconds, epochs per seed, stages, and
    what the runs' records say of how they ran."""
    hp = for_run(ROOT, selection_file("authors", BENCH, model), model=model, dataset=name, point=None, config=config)
    run = settings_for(config, hp, model=model, dataset=name)
    specs = [RunSpec(name, model, s, folder / name, folder / "ckpt" / name / model / str(s)) for s in range(seeds)]
    t0 = time.perf_counter()
    refused = None
    if stack and seeds > 1:
        try:
            records = [r for r, _ in run_training_stacked(specs, run)]
            stages = 1
        except StackRefused as e:
            refused, records = str(e), []
    if not stack or seeds == 1 or refused:
        records = [run_training(spec, run)[0] for spec in specs]
        stages = seeds
    wall = time.perf_counter() - t0
    epochs = [float(r["epochs"]) for r in records]
    return {"wall": wall, "epochs": epochs, "stages": stages, "stacked": stages == 1 and seeds > 1,
            **({"stack_refused": refused} if refused else {}),
            "deterministic": all(bool(r.get("deterministic", config.deterministic)) for r in records),
            "nondeterministic_ops": sorted({op for r in records for op in r.get("nondeterministic_ops", [])}),
            "precision_effective": sorted({str(r.get("precision_effective", config.precision)) for r in records}),
            "cuda_graph": [r.get("cuda_graph") for r in records]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--params", default=str(ROOT / "params.yaml"))
    p.add_argument("--config", default="p06_pd3_t3", help="a key of params.yaml study.configs")
    p.add_argument("--n-samples", type=int, default=1_000_000)
    p.add_argument("--measure-samples", type=int, default=100_000)
    p.add_argument("--measure-epochs", type=int, default=2)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--record", type=Path, default=ROOT / "results/study/multitab_bench_n100k_3seeds_cap40",
                   help="a study record: the projection's epochs per run (its metrics.csv)")
    p.add_argument("--max-epochs", type=int, default=None, help="the real runs' cap (default: the study's)")
    p.add_argument("--models", default=None, help="comma-separated subset of the study's models (default: all)")
    p.add_argument("--stack", action="store_true", help="stack each model's seeds (train.stack_seeds)")
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default=None)
    p.add_argument("--deterministic", choices=["true", "false"], default=None)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None)
    p.add_argument("--out", type=Path, default=None, help="default results/benchmarks/projection_check_<device>.json")
    a = p.parse_args(argv)

    raw = load_params(a.params)
    study = raw.study
    if a.config not in study.configs:
        raise SystemExit(f"--config {a.config}: not one of study.configs ({', '.join(study.configs)})")
    config = group_train(raw, study.group)
    config = replace(config, progress=False, cuda_graph=a.cuda_graph or config.cuda_graph,
                     **({"precision": a.precision} if a.precision else {}),
                     **({"device": a.device} if a.device else {}),
                     **({"deterministic": a.deterministic == "true"} if a.deterministic else {}),
                     **({"max_epochs": a.max_epochs} if a.max_epochs else {}))
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    device = str(resolve_device(config.device))
    models = list(raw.group(study.group).models)
    if a.models:
        models = [m for m in models if m in a.models.split(",")]
    try:
        metrics = pd.read_csv(a.record / "metrics.csv", usecols=["config", "model", "seed", "epochs", "n_train"])
    except (OSError, ValueError) as err:
        raise SystemExit(f"--record {a.record}: cannot read its metrics.csv ({err})") from None
    record_rows = sc.record_train_rows(metrics, a.record)

    def at(samples: int) -> Any:
        return profiled(raw.replace(study=dataclasses.replace(study, data={**study.data, "n_samples": samples})),
                        "study")

    scale = a.n_samples / a.measure_samples
    start = sc.process_start_seconds() + sc.device_init_seconds(device)
    load0 = os.getloadavg()[0]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"measuring {a.config} at {a.measure_samples:,} samples", flush=True)
        measured = sc.measure(at(a.measure_samples), config, a.config, models, a.measure_epochs, Path(tmp) / "m",
                              stack=a.seeds if a.stack else 1)
        print(f"training {a.config} for real at {a.n_samples:,} samples", flush=True)
        full = at(a.n_samples)
        frames, meta = synthesize_config(a.config, full.bench)
        write_dataset(Path(tmp) / "r" / a.config, frames, meta)
        del frames
        real = {m: train_for_real(full, config, a.config, m, a.seeds, Path(tmp) / "r", a.stack) for m in models}
    # the record's epochs under this run's cap (a dry run caps at a few)
    record_epochs = {m: min(sc.epochs_per_run(metrics, stacked=bool(real[m]["stacked"]))[a.config, m],
                            float(config.max_epochs or 100)) for m in models}
    per_model: dict[str, Any] = {}
    for m in models:
        r = real[m]
        real_seconds = r["wall"] + r["stages"] * start
        ran = [max(r["epochs"])] * a.seeds if r["stacked"] else r["epochs"]
        per_model[m] = {
            "real_seconds": round(real_seconds, 1), "real_training_seconds": round(r["wall"], 1),
            "stage_starts_added": r["stages"], "real_epochs": r["epochs"], "record_epochs": record_epochs[m],
            "with_record_epochs": verdict(real_seconds, projected_seconds(measured[m], [record_epochs[m]] * a.seeds,
                                                                           scale, start)),
            "with_real_epochs": verdict(real_seconds, projected_seconds(measured[m], ran, scale, start)),
            **{k: r[k] for k in ("stacked", "deterministic", "nondeterministic_ops", "precision_effective",
                                 "cuda_graph") if k in r},
            **({"stack_refused": r["stack_refused"]} if "stack_refused" in r else {}),
        }
    real_total = sum(v["real_seconds"] for v in per_model.values())
    result = {
        "what": "one configuration trained for real against study_cost's projection for it (see docstring)",
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs", "cpu": cpu_model(),
        "device": sc.device_name(device), "torch": torch.__version__, "commit": git_commit(ROOT),
        "load_average_at_start": load0, "config": a.config, "n_samples": a.n_samples,
        "measured_at_samples": a.measure_samples, "seeds": a.seeds, "models": models, "stack_seeds": a.stack,
        "precision": config.precision, "cuda_graph": config.cuda_graph, "deterministic_requested": config.deterministic,
        "deterministic": all(v["deterministic"] for v in per_model.values()), "max_epochs": config.max_epochs,
        "record": str(a.record), "record_train_rows": record_rows,
        "record_rows_equal_real": record_rows == round(0.7 * a.n_samples),
        "stage_start_seconds": round(start, 2), "tolerance": TOLERANCE, "per_model": per_model,
        "real_seconds": round(real_total, 1),
        "with_record_epochs": verdict(real_total, sum(v["with_record_epochs"]["projected_seconds"]
                                                      for v in per_model.values())),
        "with_real_epochs": verdict(real_total, sum(v["with_real_epochs"]["projected_seconds"]
                                                    for v in per_model.values())),
        "wall_seconds": round(time.perf_counter() - t_all, 1),
    }
    kind = "cuda" if device.startswith("cuda") else "cpu"
    out = a.out or ROOT / "results/benchmarks" / f"projection_check_{kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{a.config} at {a.n_samples:,} samples x {len(models)} models x {a.seeds} seeds on {result['device']}: "
          f"real {real_total:.0f} s; projected {result['with_record_epochs']['projected_seconds']:.0f} s with the "
          f"record's epochs (ratio {result['with_record_epochs']['ratio']}), "
          f"{result['with_real_epochs']['projected_seconds']:.0f} s with the real epochs (ratio "
          f"{result['with_real_epochs']['ratio']}); within {TOLERANCE:.0%}: "
          f"{result['with_record_epochs']['within_15_percent']} / {result['with_real_epochs']['within_15_percent']}"
          f"; median real epochs {statistics.median(e for v in per_model.values() for e in v['real_epochs']):g}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
