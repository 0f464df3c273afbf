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

import pandas as pd
import torch

from multitab.config import Params, load_params
from multitab.config.train import TrainConfig
from multitab.datasets.bench import synthesize_config, write_dataset
from multitab.datasets.schema import DatasetSchema, schema_from_meta
from multitab.evaluation.paper.complexity import complexity
from multitab.hparams import BENCH, for_run, load, selection_file
from multitab.models import build_model
from multitab.runs.profiles import group_train, profiled
from multitab.runs.resolve import settings_for
from multitab.runtime.provenance import cpu_model, git_commit
from multitab.training.compute_mode import tf32
from multitab.training.device import resolve_device
from multitab.training.run import RunSpec, run_training
from multitab.training.stacked import StackRefused, run_training_stacked

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


def split_startup(wall: float, epoch_seconds: list[float], members: int) -> dict[str, float]:
    """One measured run's (or stack member's) seconds per steady epoch and its start-up in two parts: `warmup`,
    the first epoch's excess over the steady epochs (fixed: kernel selection, allocator growth, not more work
    at more rows), and `startup_per_row`, the wall time left over per member (data loading, model build, test
    evaluation: scaled with the rows). `epoch_seconds` are the per-member epoch seconds, first epoch first."""
    steady = epoch_seconds[1:] or epoch_seconds
    per_epoch = statistics.median(steady)
    warmup = max(0.0, epoch_seconds[0] - per_epoch)
    # the epochs as run: the first one's warm-up is counted in `warmup`, the rest at the steady rate
    rest = max(0.0, wall / members - per_epoch * len(epoch_seconds) - warmup)
    return {"seconds_per_epoch": per_epoch, "warmup": warmup, "startup_per_row": rest, "startup": warmup + rest}


def run_seconds(m: dict[str, float], epochs: float, scale: float, stage_start: float) -> float:
    """Projected seconds of one run (one stack member) from its measurement `m` (split_startup's keys and
    `stack_members`): the stage's fixed start shared by the stack's members, the fixed warm-up, and the per-row
    start-up and `epochs` steady epochs scaled by `scale` (target rows / measured rows)."""
    return (stage_start / m["stack_members"] + m["warmup"]
            + (m["startup_per_row"] + epochs * m["seconds_per_epoch"]) * scale)


def data_stack_seconds(m: dict[str, float], epochs_by_config: dict[str, float], seeds: int, scale: float,
                       stage_start: float) -> float:
    """Projected seconds of every configuration in `epochs_by_config` (one task count) x `seeds` seeds of one
    model trained as ONE stack, from the measurement `m` of one member of such a stack (`stack_members` of
    them, the stacked epoch and start-up shared out): the stack runs until its slowest member stops, at the
    whole stack's cost throughout, and pays the stage start and the warm-up once. A model measured alone
    (`stack_members` 1: it cannot stack) runs every configuration and seed separately, each for its own
    configuration's epochs."""
    if m["stack_members"] == 1:
        return sum(run_seconds(m, e, scale, stage_start) for e in epochs_by_config.values()) * seeds
    members = len(epochs_by_config) * seeds
    if m["stack_members"] != members:
        raise ValueError(f"measured a stack of {m['stack_members']:g} members, projecting one of {members}")
    return members * run_seconds(m, max(epochs_by_config.values()), scale, stage_start)


def epochs_per_run(metrics: pd.DataFrame, stacked: bool) -> dict[tuple[str, str], float]:
    """Epochs per run by (configuration, model) from a study record's metrics.csv (one row per task): the
    median over the seeds for separate runs, the max for a stack (it runs until its slowest member stops)."""
    runs = metrics.drop_duplicates(["config", "model", "seed"]).groupby(["config", "model"])["epochs"]
    got = runs.max() if stacked else runs.median()
    return {(str(c), str(m)): float(v) for (c, m), v in got.items()}


def choose_epoch_record(rows_by_record: dict[str, int], target_rows: int) -> tuple[str, bool]:
    """The record whose epochs the projection takes, and whether it was measured at the target's training rows:
    the one at `target_rows` when given, else the largest (its epoch count assumed to hold at the target)."""
    at_target = [r for r, n in rows_by_record.items() if n == target_rows]
    if at_target:
        return at_target[0], True
    return max(rows_by_record, key=lambda r: rows_by_record[r]), False


def record_train_rows(metrics: pd.DataFrame, record: Path) -> int:
    rows = set(metrics["n_train"].astype(int))
    if len(rows) != 1:
        raise SystemExit(f"{record}/metrics.csv: runs at {sorted(rows)} training rows; a record for the projection "
                         "must hold one size")
    return rows.pop()


# (rows, inner, columns) of matrix products the study's models run at batch 2048: an MLP layer, a batched
# expert layer's single product, MultiTab-Net's inter-sample q/k/v projection (t = 7) and its token FFN.
PEAK_SHAPES: tuple[tuple[int, int, int], ...] = ((2048, 512, 512), (2048, 256, 128), (2048, 624, 1872),
                                                 (79872, 16, 256))


def matmul_peak(precision: str, threads: int, repeats: int = 5, device: str = "cpu") -> dict[str, float]:
    """FLOP/s of torch.mm per shape of PEAK_SHAPES in `precision` on `device` (median of `repeats` timings;
    on CUDA synchronised, so a timing is the kernels' own; tf32: TF32 products on CUDA, fp32 on a CPU), and the
    best."""
    torch.set_num_threads(max(threads, 1))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with tf32(torch.device(device), precision):
        rates = {f"{m}x{k}x{n}": _mm_rate(m, k, n, dtype, device, repeats) for m, k, n in PEAK_SHAPES}
    return {**rates, "best": max(rates.values())}


def _mm_rate(m: int, k: int, n: int, dtype: torch.dtype, device: str, repeats: int) -> float:
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    for _ in range(3):
        a @ b
    inner = 50 if cuda else 5  # a CUDA product of these shapes takes microseconds: time a longer loop
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return 2.0 * m * k * n / statistics.median(times)


def forward_flops(schema: DatasetSchema, model: str, protocol: str, batch_size: int) -> float:
    """Forward FLOPs per sample of `model` as the study builds it (at its batch: inter-sample attention
    grows with the batch)."""
    built = build_model(model, schema, load(BENCH, model, protocol=protocol, root=ROOT).model)
    return float(complexity(built, schema, batch_size=batch_size)["flops"])


def measure(params: Params, config: TrainConfig, name: str, models: list[str], epochs: int,
            folder: Path, stack: int = 1, data_names: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Per model: seconds per epoch and start-up of one run, or, with `stack` > 1, of one member of a stacked
    run of `stack` seeds (the stacked epoch and start-up shared out over its members), each seed on every
    configuration of `data_names` where given (`name` among them: one stack of len(data_names) x `stack`
    members); a model that cannot stack is measured alone on `name` and says why (`stack_refused`)."""
    for n in dict.fromkeys([name, *(data_names or [])]):
        frames, meta = synthesize_config(n, params.bench)
        write_dataset(folder / n, frames, meta)
        if n == name:
            schema = schema_from_meta(meta)
    out = {}
    for model in models:
        cfg = replace(config, max_epochs=epochs, progress=False)
        t0 = time.perf_counter()
        hp = for_run(ROOT, selection_file("authors", BENCH, model), model=model, dataset=name, point=None, config=cfg)
        members, refused = 1, None
        if stack > 1:
            specs = [RunSpec(n, model, s, folder / n, folder / "ckpt" / n / model / str(s))
                     for n in (data_names or [name]) for s in range(stack)]
            try:
                runs = run_training_stacked(specs, settings_for(cfg, hp, model=model, dataset=name))
                members = len(specs)
            except StackRefused as e:
                refused = str(e)
        if members == 1:
            runs = [run_training(RunSpec(name, model, 0, folder / name, folder / "ckpt" / name / model),
                                 settings_for(cfg, hp, model=model, dataset=name))]
        record, history = runs[0]
        wall = time.perf_counter() - t0
        # steady state: the epochs after the first (which pays one-off warm-up), validation and checkpoints
        # included; a stacked epoch is the sum of its members' shares (each member's row holds its share)
        per_epoch_all = [sum(float(h[e]["epoch_seconds"]) for _, h in runs) / members for e in range(len(history))]
        split = split_startup(wall, per_epoch_all, members)
        per_epoch = split["seconds_per_epoch"]
        out[model] = {"wall": wall, "epochs": record["epochs"], **split,
                      "stack_members": members, **({"stack_refused": refused} if refused else {}),
                      "samples_per_second": record["samples_per_second"],
                      **({"cuda_graph": record["cuda_graph"]} if "cuda_graph" in record else {}),
                      **{k: record[k] for k in ("deterministic", "nondeterministic_ops", "precision_effective")
                         if k in record},
                      "n_train": record["n_rows"]["train"], "n_val": record["n_rows"]["val"],
                      "n_test": record["n_rows"]["test"],
                      "forward_flops_per_sample": forward_flops(schema, model, params.protocol, config.batch_size)}
        print(f"  {name} {model}: {per_epoch:.1f} s/epoch ({record['samples_per_second']:.0f} samples/s), "
              f"warm-up {split['warmup']:.1f} s, start-up + test evaluation {split['startup_per_row']:.1f} s"
              + (f" (per member of a stack of {members})" if members > 1 else "")
              + (f"; not stacked: {refused}" if refused else ""), flush=True)
    return out


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

    record_metrics: dict[str, pd.DataFrame] = {}
    for r in a.record or []:
        try:
            record_metrics[str(r)] = pd.read_csv(r / "metrics.csv",
                                                 usecols=["config", "model", "seed", "epochs", "n_train"])
        except (OSError, ValueError) as err:
            raise SystemExit(f"--record {r}: cannot read its metrics.csv ({err}); give a study record folder "
                             "(results/study/<name>)") from None
        missing = {(c, m) for c in configs for m in models} - set(epochs_per_run(record_metrics[str(r)], False))
        if missing:
            raise SystemExit(f"--record {r}: metrics.csv has no runs of {sorted(missing)[:3]}...; give a record of "
                             "the whole study")
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
    epochs_measured_at_rows: int | None = None
    epochs: dict[tuple[str, str], float]
    if record_metrics:
        chosen, at_target = choose_epoch_record(rows_by_record, target_rows)
        epochs_measured_at_rows = rows_by_record[chosen]
        medians = epochs_per_run(record_metrics[chosen], stacked=False)
        maxima = epochs_per_run(record_metrics[chosen], stacked=True)
        epochs = {(c, m): (maxima if stacked[m] else medians)[c, m] for c in configs for m in models}
        epochs_source = (f"{chosen}/metrics.csv: per configuration and model, the median epochs over the seeds "
                         "(separate runs)" + (", the max over the seeds for a stack (it runs until its slowest "
                                              "member stops)" if any(stacked.values()) else "")
                         + (f"; measured at {epochs_measured_at_rows:,} training rows, the projection's size"
                            if at_target else
                            f"; measured at {epochs_measured_at_rows:,} training rows: ASSUMED to hold at "
                            f"{target_rows:,}"))
    else:
        e = a.epochs if a.epochs is not None else 20.0
        epochs = {(c, m): e for c in configs for m in models}
        epochs_source = f"assumed {e:g} epochs per run (early stopping; not measured)"
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
