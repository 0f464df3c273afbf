"""Projected wall time of the whole MultiTab-Bench study (Figures 5 + 6: params `study.configs` x
the models of run group `runs.study`) at N samples x S seeds on this machine, from a measured subset.
A PROJECTION, not a run.

How: for each task count t among the study's configurations (3, 5, 7) this script synthesises one study
dataset at `--n-samples` (the study's generator, `bench.configs` settings) and trains every study model on it
for `--measure-epochs` epochs through `multitab.training.run_training` (the train stage's own code: data
loading, model build, per-epoch validation, test evaluation), with the study's training settings
(`runs.study.train` over `train`, params.yaml) and `train.num_threads` threads. Measured per (model, t):
seconds per epoch (the median of the epochs after the first; validation and checkpoints included) and the
start-up, split in two: a FIXED part that does not grow with the rows (the first epoch's excess over the steady
epochs: kernel selection, allocator growth; and, once per stage process, one `python -m stages.train --help`
start, a stage's interpreter and imports, plus the device's initialisation in a fresh process, CUDA's context)
and a PER-ROW part (the rest of the run's wall time less its epochs: data loading, model build, test
evaluation). Then

    projected wall = sum over configs, models, seeds of
                     (fixed + per-row start-up x scale + E x seconds per epoch x scale) / workers

with scale = n_samples / measured samples (1 unless `--measure-samples`: an epoch's cost is linear in the
training rows at a fixed batch size, so only per-row work is scaled; the fixed part is not), `workers` stages
at once (orchestration.workers; one thread each: perfect packing assumed, DVC/Prefect overhead per stage not
included beyond the interpreter start) and E the epochs per run: `--epochs` (an assumption, stated in the
output), or from a study record (`--record results/study/<name>`, its metrics.csv): per configuration and
model, the median over the seeds for separate runs, and for a stack (`--stack`) the MAX over its members, since
a stacked run lasts until its slowest member stops (its epoch taken at the full stack's cost throughout: an
upper bound where the cost falls as members leave). `--record` may be given more than once: the record whose
training rows equal the projection's (`epochs_measured_at_rows` in the output) is used; else the largest, and
the output says that the projection assumes that size's epoch count at n_samples. The paper's cap (100
epochs) is reported as the worst case.

The compute floor: the same study's arithmetic at this machine's best matrix-product rate, i.e. what no
software could beat at this precision. Training FLOPs per run = E x (3 F x training rows + F x validation
rows) + F x test rows, with F the forward FLOPs per sample of the model at the study's batch size
(multitab.evaluation.paper.complexity, the paper's Table 4 convention; backward ~ 2 x forward) and E the epochs
above; the rate is the best of a few matrix products of the models' own shapes (median of repeats) at
`train.num_threads` threads in the measured precision, and `workers` of them at once. So
`floor_wall_seconds` > `goal_seconds` says the goal cannot be met on this machine at that precision, and
`fraction_of_peak` per model says how close the training code already is.

`--device cuda` measures the runs on the GPU (and the matrix-product rate there); the record names the
device (`device`), and `--workers` should then be the stages the GPU runs at once (1 unless
`orchestration.gpu_concurrency` says more). benchmarks/gpu_session.sh runs it for a lent GPU.

`--precision bf16` measures the study with `train.precision: bf16` (autocast; opt-in, not the paper's
fp32) and writes `study_cost_cpu_bf16.json` by default.

`--stack` projects the study with `train.stack_seeds: true` (docs/training.md, "Stacked seeds"): each
measured model trains its `--seeds` seeds as one stacked run (`run_training_stacked`, the train_stack
stage's code), and per member it counts the stacked epoch and start-up shared out over the members and one
stage start per stack, for the stack's slowest member's epochs (above). A model that cannot stack (dropout) is
measured alone, with the reason in `stack_refused`. Default output `study_cost_cpu_stacked.json`.

`--stack-data` projects the study with every configuration of one task count and its seeds stacked per model
(stacked members may differ in their data of one shape: training/stacked_data.py; the study's configurations
of one task count have the same features, tasks and split sizes). Per task count it measures one such stack,
every configuration of that count (each its own synthesised dataset) x `--seeds` seeds, and projects each
stack at its slowest member's epochs (the max over its configurations and seeds, from the record as `--stack`
counts them) at the whole stack's measured epoch cost, the stage start and the warm-up once per stack
(`data_stack_seconds`). A model that cannot stack is projected as separate runs. Default output
`study_cost_cpu_stacked_data.json`. (The DAG's train_stack stages stack the seeds of one dataset only: this
projects what stacking across the configurations would give.)

Run:  flock /tmp/multitab-bench.lock python benchmarks/study_cost.py [--n-samples 100000] [--seeds 5]
      [--epochs 20 | --record results/study/<name> ...] [--precision fp32|bf16] [--stack | --stack-data]
      [--out results/benchmarks/study_cost_cpu.json]
Timings taken while other jobs share the CPU are high: say so when quoting them (the output records the
load average).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from multitab.config import load_params
from multitab.runs.profiles import group_train, profiled
from multitab.runtime.provenance import cpu_model, git_commit
from multitab.training.device import resolve_device

# siblings of this script, not packages: what it measures and the projection's arithmetic; the names it does
# not use itself are here for the tests, step_profile.py and projection_check.py, which read them from it
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _study_cost_measure import PEAK_SHAPES, forward_flops, matmul_peak, measure  # noqa: E402, F401
from _study_cost_model import (  # noqa: E402, F401
    choose_epoch_record,
    data_stack_seconds,
    epochs_by_run,
    epochs_per_run,
    read_records,
    record_train_rows,
    run_seconds,
    split_startup,
)

ROOT = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 2 * 3600.0  # the project's goal for 100,000 x 5 seeds on the 2-core CPU


def device_name(device: str) -> str:
    """The device the runs trained on, in words: the GPU's name, or the CPU's model."""
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)} (CUDA)"
    return cpu_model()


def process_start_seconds() -> float:
    t0 = time.perf_counter()
    path = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "stages.train", "--help"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        raise SystemExit(f"`python -m stages.train --help` failed (a stage process cannot start here):\n{done.stderr}")
    return time.perf_counter() - t0


def device_init_seconds(device: str) -> float:
    """Seconds a fresh process takes to initialise `device` after importing torch (CUDA's context; ~0 on the
    CPU): paid once per stage process, at any row count."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    code = ("import sys, time, torch; d = sys.argv[1]; t0 = time.perf_counter(); torch.zeros(1, device=d)\n"
            "if d.startswith('cuda'): torch.cuda.synchronize(d)\nprint(time.perf_counter() - t0)")
    done = subprocess.run([sys.executable, "-c", code, device], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        raise SystemExit(f"initialising {device} in a fresh process failed:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--params", default=str(ROOT / "params.yaml"))
    p.add_argument("--n-samples", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=float, default=None, help="assumed epochs per run (default 20)")
    p.add_argument("--record", type=Path, action="append", default=None,
                   help="a study record: epochs per run from its metrics.csv; repeat it to give records at other "
                        "sizes (the one at the projection's training rows is used, else the largest)")
    p.add_argument("--measure-epochs", type=int, default=2, help="epochs per measured run (>= 2: the first is warm-up)")
    p.add_argument("--measure-samples", type=int, default=None,
                   help="measure on datasets of this size and scale seconds per epoch by the training rows "
                        "(default: --n-samples, no scaling)")
    p.add_argument("--workers", type=int, default=None, help="stages at once (default: orchestration.workers)")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default=None,
                   help="train.precision for the measured runs (default: the study's, fp32)")
    p.add_argument("--stack", action="store_true",
                   help="project with train.stack_seeds on: each dataset x model's --seeds seeds train as one "
                        "stacked run (measured as such)")
    p.add_argument("--stack-data", action="store_true",
                   help="project with every configuration of one task count x its --seeds seeds as one stacked "
                        "run per model (stacked members on their own data of one shape; measured as such)")
    p.add_argument("--cuda-graph", action="store_true", help="train.cuda_graph on for the measured runs")
    p.add_argument("--models", default=None,
                   help="comma-separated subset of the study's models to measure and project (default: all; the "
                        "record's `models` names them and its totals cover only them)")
    p.add_argument("--deterministic", choices=["true", "false"], default=None,
                   help="train.deterministic for the measured runs (default: the study's, true); the record says "
                        "how each run ran (`measured.*.deterministic`: false where torch warned of an op)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="where the measured runs train (default: the study's train.device)")
    p.add_argument("--out", type=Path, default=None,
                   help="default results/benchmarks/study_cost_{cpu,cuda}[_bf16][_stacked|_stacked_data].json")
    a = p.parse_args(argv)

    raw = load_params(a.params)
    study = raw.study
    measure_samples = a.measure_samples or a.n_samples
    raw = raw.replace(study=dataclasses.replace(study, data={**study.data, "n_samples": measure_samples}))
    # an epoch's cost is linear in the training rows at a fixed batch size (split 70/15/15 of the samples)
    scale = a.n_samples / measure_samples
    params = profiled(raw, "study")
    config = group_train(raw, study.group)
    if a.precision is not None:
        config = replace(config, precision=a.precision)
    if a.device is not None:
        config = replace(config, device=a.device)
    if a.cuda_graph:
        config = replace(config, cuda_graph=True)  # ConfigError with train.compile: pick one
    if a.deterministic is not None:
        config = replace(config, deterministic=a.deterministic == "true")
    device = str(resolve_device(config.device))
    kind = "cuda" if device.startswith("cuda") else "cpu"
    out_path = a.out or ROOT / "results/benchmarks" / (
        f"study_cost_{kind}" + ("" if config.precision == "fp32" else f"_{config.precision}")
        + ("_stacked_data" if a.stack_data else "_stacked" if a.stack else "") + ("_graph" if a.cuda_graph else "")
        + ("_nondeterministic" if not config.deterministic else "") + ".json")
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    workers = a.workers or raw.orchestration.workers
    models = list(raw.group(study.group).models)
    if a.models:
        wanted = a.models.split(",")
        unknown = sorted(set(wanted) - set(models))
        if unknown:
            raise SystemExit(f"--models: {unknown} are not the study's models ({', '.join(models)})")
        models = [m for m in models if m in wanted]
    configs = list(study.configs)
    n_tasks = {c: raw.bench.configs[c].n_tasks for c in configs}
    representative = {t: next(c for c in configs if n_tasks[c] == t) for t in sorted(set(n_tasks.values()))}

    record_metrics = read_records(a.record or [], configs, models)
    rows_by_record = {r: record_train_rows(df, Path(r)) for r, df in record_metrics.items()}

    load0 = os.getloadavg()[0]
    start = process_start_seconds() + device_init_seconds(device)
    if kind == "cuda":  # the context is paid in `start`: not in the first measured model's warm-up
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
    print(f"study cost: {a.n_samples:,} samples (measured at {measure_samples:,}, scaled linearly), "
          f"measuring {a.measure_epochs} epoch(s) per model on t = "
          f"{sorted(representative)}; stage process start {start:.1f} s", flush=True)
    measured: dict[int, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t, name in representative.items():
            same_t = [c for c in configs if n_tasks[c] == t] if a.stack_data else None
            measured[t] = measure(params, config, name, models, a.measure_epochs, Path(tmp),
                                  stack=a.seeds if a.stack or a.stack_data else 1, data_names=same_t)

    stacked = {m: any(per_t[m]["stack_members"] > 1 for per_t in measured.values()) for m in models}
    target_rows = round(next(iter(measured.values()))[models[0]]["n_train"] * scale)
    epochs, epochs_source, epochs_measured_at_rows = epochs_by_run(
        record_metrics, rows_by_record, target_rows, stacked, configs, models, assumed=a.epochs)
    epochs_by_model = {m: statistics.median(epochs[c, m] for c in configs) for m in models}

    if a.stack_data:
        by_t = {t: [c for c in configs if n_tasks[c] == t] for t in measured}
        per_model = {m: sum(data_stack_seconds(measured[t][m], {c: epochs[c, m] for c in cs}, a.seeds, scale, start)
                            for t, cs in by_t.items()) for m in models}
        worst = sum(data_stack_seconds(measured[t][m], dict.fromkeys(cs, 100.0), a.seeds, scale, start)
                    for t, cs in by_t.items() for m in models)
    else:
        per_model = {m: sum(run_seconds(measured[n_tasks[c]][m], epochs[c, m], scale, start) for c in configs)
                     * a.seeds for m in models}
        worst = sum(run_seconds(measured[n_tasks[c]][m], 100.0, scale, start)
                    for c in configs for m in models) * a.seeds
    total = sum(per_model.values())

    # the compute floor: the study's training arithmetic at this machine's best matrix-product rate
    peak = matmul_peak(config.precision, config.num_threads, device=device)

    def epoch_flops(m: dict[str, float]) -> float:
        """One measured epoch's arithmetic: forward + backward (~3 F) on the training rows, F on validation."""
        return m["forward_flops_per_sample"] * (3 * m["n_train"] + m["n_val"])

    def run_flops(model: str, t: int, epochs: float) -> float:
        m = measured[t][model]
        return scale * (epochs * epoch_flops(m) + m["forward_flops_per_sample"] * m["n_test"])

    flops_per_model = {m: sum(run_flops(m, n_tasks[c], epochs[c, m]) for c in configs) * a.seeds for m in models}
    floor = sum(flops_per_model.values()) / (peak["best"] * workers)
    # how close the training code runs to that rate: training FLOP/s in the measured steady-state epochs
    fraction_of_peak = {str(t): {m: round(epoch_flops(v) / v["seconds_per_epoch"] / peak["best"], 3)
                                 for m, v in per_t.items()} for t, per_t in measured.items()}
    result = {
        "what": "PROJECTION of the Figure 5+6 study's wall time from a measured subset (see docstring)",
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_at_start": load0, "load_average_at_end": os.getloadavg()[0],
        "n_samples": a.n_samples, "measured_at_samples": measure_samples,
        "scaling": ("seconds per epoch and the per-row start-up x n_samples / measured_at_samples; the warm-up and "
                    "the stage start fixed") if scale != 1 else "none",
        "seeds": a.seeds, "configs": configs, "models": models, "workers": workers,
        "commit": git_commit(ROOT), "torch": torch.__version__,
        "cpu": cpu_model(), "device": device_name(device), "precision": config.precision,
        "stack_seeds": a.stack or a.stack_data,
        "stack_data": ({str(t): [c for c in configs if n_tasks[c] == t] for t in measured} if a.stack_data else None),
        "cuda_graph": config.cuda_graph, "deterministic_requested": config.deterministic,
        "deterministic": all(bool(m.get("deterministic", config.deterministic)) for per_t in measured.values()
                             for m in per_t.values()),
        "threads_per_run": config.num_threads, "measure_epochs": a.measure_epochs,
        "stage_process_start_seconds": round(start, 2),
        "fixed_seconds": "per stage: stage_process_start_seconds (interpreter, imports, device initialisation); "
                         "per run: measured.*.warmup",
        "measured": {str(t): v for t, v in measured.items()}, "epochs_per_run": epochs_by_model,
        "epochs_per_run_by_config": {c: {m: epochs[c, m] for m in models} for c in configs},
        "epochs_rule": ("stacked: the max over a stack's members per configuration and model; separate: the median"
                        if any(stacked.values()) else "the median over the seeds per configuration and model")
                       if record_metrics else "assumed",
        "epochs_measured_at_rows": epochs_measured_at_rows, "target_train_rows": target_rows,
        "epochs_source": epochs_source,
        "core_seconds_per_model": {m: round(v, 1) for m, v in per_model.items()},
        "projected_wall_seconds": round(total / workers, 1),
        "projected_wall_seconds_at_100_epochs": round(worst / workers, 1),
        "goal_seconds": GOAL_SECONDS,
        "ratio_to_goal": round(total / workers / GOAL_SECONDS, 3),
        "matmul_flops_per_second": {k: round(v / 1e9, 1) for k, v in peak.items()},
        "matmul_units": "GFLOP/s per run (threads_per_run threads)",
        "training_pflop_per_model": {m: round(v / 1e15, 3) for m, v in flops_per_model.items()},
        "fraction_of_peak": fraction_of_peak,
        "floor_wall_seconds": round(floor, 1),
        "floor_ratio_to_goal": round(floor / GOAL_SECONDS, 3),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    hours = total / workers / 3600
    print(f"PROJECTED study wall time ({len(configs)} configs x {len(models)} models x {a.seeds} seeds, "
          f"{a.n_samples:,} samples, {epochs_source}, {workers} workers): {hours:.2f} h "
          f"(goal {GOAL_SECONDS / 3600:.0f} h: ratio {result['ratio_to_goal']}); at the 100-epoch cap "
          f"{worst / workers / 3600:.2f} h. Per model (core-hours): "
          + ", ".join(f"{m} {v / 3600:.2f}" for m, v in per_model.items())
          + f". Trained on {result['device']}; load average {load0:.1f} at start (a shared CPU: timings high).")
    print(f"COMPUTE FLOOR ({config.precision}): {sum(flops_per_model.values()) / 1e15:.2f} PFLOP of training at "
          f"{peak['best'] / 1e9:.0f} GFLOP/s per run x {workers} = {floor / 3600:.2f} h "
          f"(ratio to the goal {result['floor_ratio_to_goal']}); share of that rate reached per model (t = 7): "
          + ", ".join(f"{m} {v:.2f}" for m, v in fraction_of_peak[str(max(measured))].items()))
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
