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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from multitab.datasets.schema import SCHEMAS  # noqa: E402
from multitab.runtime.provenance import git_commit, machine  # noqa: E402

# siblings of this script, not packages: the processed stand-in folders, and one case through the train stage
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _train_memory_data import SIZES, tensor_bytes, write_processed  # noqa: E402
from _train_memory_stage import MODEL, run_case  # noqa: E402

BARS = {"aliexpress": {"seconds_to_first_step": 120.0, "peak_gb": 12.0}, "higgs": {"peak_over_tensors": 2.0}}


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
