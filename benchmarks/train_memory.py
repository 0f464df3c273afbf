"""Memory and start-up time of one training run at the paper's full size: MMoE, one epoch, through the
train stage itself (`python -m stages.train`), in a child process per case.

Cases (rows of the real releases; processed stand-in folders in preprocess's format: float32 numerical
features, int64 categorical codes with 0 reserved, int64 binary / float32 regression targets, row groups of
2^20 rows as pyarrow writes them):
- aliexpress: 17,717,195 rows (train 10,942,105 and val 1,215,789 from the official 12,157,894-row train
  file, test 5,559,301), 60 numerical and 15 categorical features, tasks click and conversion;
- higgs: 11,000,000 rows (train 9,900,000, val and test 550,000 each), 17 numerical and 4 categorical
  features, a binary task and 7 regressions.
`--scale 0.1` runs a tenth of every split (measure there first: the full AliExpress case needs ~12 GB).

Measured per case, from the child's start: seconds until the first optimiser step (interpreter and imports,
params and the run's verdict, loading, the run's fingerprint with the data files' sha256, model build),
with the phases in between; the epoch's wall time (the optimisation loop, from the optimiser steps'
times, plus validation) and the test evaluation's; the whole stage's wall time (checkpoints and the record
included); the peak resident memory of the process (its ru_maxrss: the kernel's count, swap aside) and
the same peak up to the first step (VmHWM); the bytes of the tensors the run holds (every split). Bars, at
full size: AliExpress starts within 120 s and peaks under 12 GB; Higgs peaks within 2x its tensors.
`--max-steps N` stops each training epoch after N batches (validation, test and the record still run on
the whole splits, so the peak is the run's): the loop's time is then extrapolated from those steps, and
the record says so (`epoch_loop_extrapolated`).

The processed folders are written once into `--data` (reused while their meta.json matches; ~5 GB for
AliExpress). `--repo PATH` runs another checkout's train stage on the same folders (before/after).
A case whose expected peak does not fit in MemAvailable is skipped with a line saying so (`--force` runs it).

Run (the record: a quiet machine, one command):
      python benchmarks/train_memory.py --scale 1 --out results/benchmarks/train_memory_cpu
      [--cases aliexpress higgs] [--data /tmp/multitab-train-memory] [--threads 0] [--max-steps N]
Timings taken while other jobs share the CPU are slow: the record states the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from multitab.config import read_yaml  # noqa: E402
from multitab.datasets.schema import SCHEMAS, DatasetSchema  # noqa: E402
from multitab.runtime.provenance import git_commit, machine  # noqa: E402

# the real releases' rows per split (AliExpress: the official train file split 0.9 / 0.1 into train / val)
SIZES = {
    "aliexpress": {"train": 10_942_105, "val": 1_215_789, "test": 5_559_301},
    "higgs": {"train": 9_900_000, "val": 550_000, "test": 550_000},
}
MODEL = "mmoe"
ROW_GROUP = 1 << 20  # pyarrow's default row group (rows)
BARS = {"aliexpress": {"seconds_to_first_step": 120.0, "peak_gb": 12.0}, "higgs": {"peak_over_tensors": 2.0}}


# ------------------------------------------------------------------------------------------------ data


def processed_meta(schema: DatasetSchema, sizes: dict[str, int]) -> dict[str, Any]:
    """meta.json as preprocess writes it (categorical cardinality + 1: code 0 is the unseen-in-train index)."""
    return {
        "dataset": schema.name,
        "features": [{"name": f.name, "kind": f.kind,
                      "cardinality": (f.cardinality or 1) + 1 if f.kind == "categorical" else None}
                     for f in schema.features],
        "tasks": [{"name": t.name, "type": t.type,
                   "n_classes": t.n_classes if t.type == "multiclass" else (2 if t.type == "binary" else None)}
                  for t in schema.tasks],
        "source": "standin", "standin": True, "n_rows": sizes,
        "target_stats": {t.name: {"mean": 0.0, "std": 1.0} for t in schema.tasks if t.type == "regression"},
        "numerical_transform": "quantile", "target_transform": "raw", "inputs": {"benchmark": "train_memory"},
    }


def _chunk(schema: DatasetSchema, rows: int, rng: np.random.Generator) -> pa.Table:
    cols: dict[str, np.ndarray] = {}
    for f in schema.features:
        if f.kind == "numerical":
            cols[f.name] = rng.standard_normal(rows, dtype=np.float32)  # the quantile transform's normal output
        else:
            cols[f.name] = rng.integers(1, (f.cardinality or 1) + 1, rows, dtype=np.int64)
    for t in schema.tasks:
        if t.type == "binary":
            positive = (t.class_ratio[1] if t.class_ratio else 50.0) / 100.0
            cols[t.name] = (rng.random(rows, dtype=np.float32) < positive).astype(np.int64)
        elif t.type == "regression":
            cols[t.name] = rng.lognormal(0.0, 0.3, rows).astype(np.float32)
        else:
            cols[t.name] = rng.integers(0, t.n_classes or 2, rows, dtype=np.int64)
    return pa.table(cols)


def write_processed(path: Path, dataset: str, sizes: dict[str, int], seed: int = 0) -> None:
    """A processed stand-in folder, written chunk by chunk (the writer holds one row group)."""
    schema = SCHEMAS[dataset]
    meta = processed_meta(schema, sizes)
    if (path / "meta.json").is_file() and json.loads((path / "meta.json").read_text()) == meta:
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        first = _chunk(schema, min(n, ROW_GROUP), rng)
        with pq.ParquetWriter(path / f"{split}.parquet", first.schema) as writer:
            writer.write_table(first, row_group_size=ROW_GROUP)
            for start in range(ROW_GROUP, n, ROW_GROUP):
                writer.write_table(_chunk(schema, min(ROW_GROUP, n - start), rng), row_group_size=ROW_GROUP)
    (path / "meta.json").write_text(json.dumps(meta, indent=2))  # last: a folder without it is rewritten


def tensor_bytes(schema: DatasetSchema, rows: int) -> int:
    """Bytes of a split's tensors: float32 numerical features and float targets, int64 codes and classes."""
    n_float = sum(t.type != "multiclass" for t in schema.tasks)
    n_long = sum(t.type == "multiclass" for t in schema.tasks)
    return rows * (4 * schema.n_num + 8 * schema.n_cat + 4 * n_float + 8 * n_long)


# ------------------------------------------------------------------------------------------ the stage


def write_project(root: Path, repo: Path, dataset: str, data: Path, threads: int | None) -> str:
    """A project folder holding one run (run group `memory`: `dataset` x mmoe x seed 0, one epoch, every
    training row, CPU) over the processed folder `data`; returns the run's key."""
    params = read_yaml(repo / "params.yaml")
    params["train"].update(device="cpu", max_epochs=1, max_train_rows=None, progress=False)
    if threads is not None:
        params["train"]["num_threads"] = threads
    params["runs"] = {"memory": {"data": {"datasets": [dataset]}, "models": [MODEL], "seeds": [0], "train": {}}}
    for section in ("study", "attribution"):  # their run groups are replaced
        params.pop(section, None)
    root.mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "hparams").symlink_to(repo / "hparams")
    (root / "data" / "processed").mkdir(parents=True)
    (root / "data" / "processed" / dataset).symlink_to(data)
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / f"{dataset}.json").write_text(json.dumps({"success": True}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "src")])}
    subprocess.run([sys.executable, "-m", "multitab.runs", "--params", str(root / "params.yaml")], cwd=root,
                   env=env, check=True, capture_output=True)
    return f"memory-{dataset}-{MODEL}-0"


# The child: marks the time and peak memory (VmHWM) of the first optimiser step (a global step hook), the
# phases before it and each evaluation, then runs the train stage's main() as `python -m stages.train`
# would. With max_steps > 0 each training epoch stops after that many batches (validation, test and the
# record run as usual, on the whole splits).
_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    marks_file, max_steps, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

    def cpu():  # CPU seconds of the process so far, every thread: what a quiet machine's wall time would be
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    marks = {"child_start": time.time(), "steps": [], "cpu_steps": []}

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    from torch.optim.optimizer import register_optimizer_step_post_hook

    def hook(optimizer, args, kwargs):
        marks["steps"].append(time.time())
        marks["cpu_steps"].append(cpu())
        if len(marks["steps"]) == 1:
            marks["hwm_first_step"] = hwm()

    register_optimizer_step_post_hook(hook)
    import multitab.training.loop as loop
    import multitab.training.run as run

    def timed(module, name):
        inner = getattr(module, name)

        def wrapper(*a, **k):
            marks.setdefault(name, []).append([time.time()])
            marks.setdefault("cpu_" + name, []).append([cpu()])
            out = inner(*a, **k)
            marks[name][-1].append(time.time())
            marks["cpu_" + name][-1].append(cpu())
            return out
        setattr(module, name, wrapper)

    for name in ("load_run_data", "resume_settings", "build_run_model", "train"):
        timed(run, name)
    timed(loop, "evaluate")
    if max_steps:
        batches = loop.iterate_batches

        def first_batches(*a, **k):
            for i, batch in enumerate(batches(*a, **k)):
                if k.get("generator") is not None and i >= max_steps:
                    return
                yield batch
        loop.iterate_batches = first_batches
    from stages.train import main
    marks["imports_done"], marks["cpu_imports_done"] = time.time(), cpu()
    marks["rc"] = main(argv)
    marks["end"], marks["hwm_end"] = time.time(), hwm()
    with open(marks_file, "w") as f:
        json.dump(marks, f)
    """
)


def _span(marks: dict[str, Any], name: str, i: int = 0) -> float | None:
    spans = marks.get(name, [])
    return spans[i][1] - spans[i][0] if len(spans) > i and len(spans[i]) == 2 else None


def run_case(repo: Path, dataset: str, data: Path, sizes: dict[str, int], work: Path, a: argparse.Namespace
             ) -> dict[str, Any]:
    schema = SCHEMAS[dataset]
    key = write_project(work / dataset, repo, dataset, data, a.threads)
    marks_file, log_file = work / f"{dataset}.marks.json", work / f"{dataset}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "src")])}
    cmd = [sys.executable, "-c", _CHILD, str(marks_file), str(a.max_steps),
           "--run", key, "--params", str(work / dataset / "params.yaml")]
    t0 = time.time()
    with log_file.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=work / dataset, env=env, stdout=log, stderr=subprocess.STDOUT)
        timer = threading.Timer(a.timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    marks = json.loads(marks_file.read_text()) if marks_file.is_file() else {}
    tensors = sum(tensor_bytes(schema, n) for n in sizes.values())
    peak = usage.ru_maxrss * 1024
    out: dict[str, Any] = {
        "dataset": dataset, "model": MODEL, "rows": sizes, "rows_total": sum(sizes.values()),
        "tensors_gb": round(tensors / 1e9, 3), "peak_rss_gb": round(peak / 1e9, 3),
        "peak_over_tensors": round(peak / tensors, 2), "exit_code": proc.returncode,
        "stage_seconds": round(time.time() - t0, 1),
    }
    if proc.returncode != 0 or marks.get("rc", 0) != 0:
        out["log_tail"] = log_file.read_text(errors="replace").splitlines()[-15:]
    steps = marks.get("steps", [])
    if steps:
        out["seconds_to_first_step"] = round(steps[0] - t0, 1)
        out["peak_rss_gb_to_first_step"] = round(marks["hwm_first_step"] / 1e9, 3)
        load = marks["load_run_data"][0][0]
        phases = {"interpreter_and_imports": marks["imports_done"] - t0,
                  "params_runs_hparams": load - marks["imports_done"]}
        for name, label in (("load_run_data", "load"), ("resume_settings", "fingerprint_with_data_sha256"),
                            ("build_run_model", "build_model")):
            phases[label] = _span(marks, name) or 0.0
        phases["train_setup_and_first_step"] = steps[0] - marks["train"][0][0]
        phases["other"] = out["seconds_to_first_step"] - sum(phases.values())
        out["phases_to_first_step"] = {k: round(v, 1) for k, v in phases.items()}
        # CPU seconds (all threads): independent of other jobs on the machine, about a quiet machine's wall
        # time where one thread works (imports, the model) and more than it where several do (the load)
        out["cpu_seconds_to_first_step"] = round(marks["cpu_steps"][0], 1)
        out["cpu_seconds_load"] = round(_span(marks, "cpu_load_run_data") or 0.0, 1)
    n_batches = -(-sizes["train"] // 2048)
    if len(steps) > 1:
        per_step = (steps[-1] - steps[0]) / (len(steps) - 1)
        out["steps_measured"] = len(steps)
        out["epoch_loop_seconds"] = round(per_step * n_batches, 1)
        out["epoch_loop_extrapolated"] = len(steps) < n_batches
        out["samples_per_second"] = round(2048 / per_step)
        cpu_step = (marks["cpu_steps"][-1] - marks["cpu_steps"][0]) / (len(steps) - 1)
        out["cpu_seconds_epoch_loop"] = round(cpu_step * n_batches, 1)
    val, test = _span(marks, "evaluate", 0), _span(marks, "evaluate", 1)
    if val is not None:
        out["val_seconds"] = round(val, 1)
        out["cpu_seconds_val"] = round(_span(marks, "cpu_evaluate", 0) or 0.0, 1)
        if "epoch_loop_seconds" in out:
            out["epoch_seconds"] = round(out["epoch_loop_seconds"] + val, 1)
    if test is not None:
        out["test_seconds"] = round(test, 1)
        out["cpu_seconds_test"] = round(_span(marks, "cpu_evaluate", 1) or 0.0, 1)
    return out


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def bars(results: list[dict[str, Any]], scale: float) -> dict[str, Any]:
    """The bars at full size (None where a case did not run or the scale is not 1)."""
    out: dict[str, Any] = {}
    for r in results:
        want = BARS.get(r["dataset"], {})
        ok = scale == 1.0 and r["exit_code"] == 0
        if "seconds_to_first_step" in want:
            out[f"{r['dataset']}_starts_within_{want['seconds_to_first_step']:.0f}_s"] = (
                ok and r.get("seconds_to_first_step", 1e9) <= want["seconds_to_first_step"]) if ok else None
        if "peak_gb" in want:
            key = f"{r['dataset']}_peak_under_{want['peak_gb']:.0f}_gb"
            out[key] = (r["peak_rss_gb"] < want["peak_gb"]) if ok else None
        if "peak_over_tensors" in want:
            out[f"{r['dataset']}_peak_within_{want['peak_over_tensors']:.0f}x_tensors"] = (
                r["peak_over_tensors"] <= want["peak_over_tensors"]) if ok else None
    return out


def markdown(record: dict[str, Any]) -> str:
    lines = [f"# Training memory and start-up at {record['scale']:g}x the paper's size ({record['model']}, one epoch)",
             "", f"Commit `{record['commit']}`, {record['machine']}, {record['memory_gb']:.0f} GB memory, "
             f"torch threads {record['threads']}; load average at the end {record['load_average']}. "
             f"{record['load_note']}", "", f"Command: `{record['command']}`", "",
             "| dataset | rows | tensors (GB) | peak RSS (GB) | peak / tensors | to first step (s) | epoch (s) | "
             "loop (s) | validation (s) | test (s) | stage (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in record["cases"]:
        loop = f"{r['epoch_loop_seconds']}{' (extrapolated)' if r.get('epoch_loop_extrapolated') else ''}" \
            if "epoch_loop_seconds" in r else "—"
        lines.append(f"| {r['dataset']} | {r['rows_total']:,} | {r['tensors_gb']:.2f} | {r['peak_rss_gb']:.2f} | "
                     f"{r['peak_over_tensors']:.2f} | {r.get('seconds_to_first_step', '—')} | "
                     f"{r.get('epoch_seconds', '—')} | {loop} | {r.get('val_seconds', '—')} | "
                     f"{r.get('test_seconds', '—')} | {r['stage_seconds']} |")
    lines += ["", "CPU seconds of the child (every thread; what other jobs on the machine do not inflate):", "",
              "| dataset | to first step | of which the load | epoch loop | validation | test |",
              "|---|---:|---:|---:|---:|---:|"]
    for r in record["cases"]:
        lines.append(f"| {r['dataset']} | {r.get('cpu_seconds_to_first_step', '—')} | "
                     f"{r.get('cpu_seconds_load', '—')} | "
                     f"{r.get('cpu_seconds_epoch_loop', '—')} | {r.get('cpu_seconds_val', '—')} | "
                     f"{r.get('cpu_seconds_test', '—')} |")
    lines += ["", "Phases before the first step (wall seconds):", ""]
    for r in record["cases"]:
        lines.append(f"- {r['dataset']}: {r.get('phases_to_first_step', 'did not reach it')}")
    lines += ["", f"Bars (full size only): {record['bars']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--scale", type=float, default=1.0, help="fraction of every split's rows (0.1: a tenth)")
    p.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "multitab-train-memory",
                   help="where the processed stand-in folders are written and kept")
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose train stage runs (default: this)")
    p.add_argument("--threads", type=int, default=None, help="train.num_threads (default: params.yaml's)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N optimiser steps (0: the whole epoch)")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds before a case is killed")
    p.add_argument("--force", action="store_true", help="run a case even where MemAvailable looks too small")
    p.add_argument("--out", type=Path, default=None, help="record stem: writes OUT.json and OUT.md")
    a = p.parse_args(argv)
    repo = a.repo.resolve()
    results = []
    with tempfile.TemporaryDirectory(prefix="multitab-train-memory-") as tmp:
        for dataset in a.cases:
            sizes = {k: max(1, round(v * a.scale)) for k, v in SIZES[dataset].items()}
            data = a.data / f"{dataset}_{sum(sizes.values())}"
            t0 = time.perf_counter()
            write_processed(data, dataset, sizes)
            print(f"{dataset}: processed folder {data} ready ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            need = 1.6 * sum(tensor_bytes(SCHEMAS[dataset], n) for n in sizes.values()) + 1e9
            if need > _mem_available() and not a.force:
                print(f"{dataset}: skipped, needs about {need / 1e9:.1f} GB and MemAvailable is "
                      f"{_mem_available() / 1e9:.1f} GB (--force runs it)", file=sys.stderr)
                continue
            results.append(run_case(repo, dataset, data, sizes, Path(tmp), a))
            print(json.dumps(results[-1]), file=sys.stderr)
    record = {
        "benchmark": "train_memory", "model": MODEL, "scale": a.scale, "commit": git_commit(repo),
        "repo": str(repo), "machine": machine(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "threads": a.threads if a.threads is not None else "params.yaml train.num_threads",
        "max_steps": a.max_steps or None,
        "command": "python benchmarks/train_memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "load_note": "machine shared with other jobs unless stated otherwise",
        "cases": results, "bars": bars(results, a.scale),
    }
    text = json.dumps(record, indent=2)
    print(text)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".json").write_text(text + "\n")
        a.out.with_suffix(".md").write_text(markdown(record))
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
