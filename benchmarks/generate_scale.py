"""MultiTab-Bench generator at the paper's scale: 1,000,000 samples x 32 features, 7 tasks (PD 3, p 0.6).

Targets: under 3 s and under 1 GB of extra memory. Reports the median time of a few runs, the peak
memory allocated during one call (tracemalloc sees numpy's buffers, the returned arrays included) and the
growth of the process's peak resident set, each with its ratio to the target. Exit status 1 if a target is
missed. Run alone (`flock /tmp/multitab-bench.lock ...`): other processes on the machine slow it down.

    PYTHONPATH=src python benchmarks/generate_scale.py [--n-samples 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import tracemalloc

from multitab.datasets.bench import generate

TARGET_SECONDS = 3.0
TARGET_BYTES = 1 << 30


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-samples", type=int, default=1_000_000)
    ap.add_argument("--n-features", type=int, default=32)
    ap.add_argument("--n-tasks", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    args = (a.n_samples, a.n_features, 0.6, [3] * a.n_tasks, 0.01)

    generate(1000, a.n_features, 0.6, [3] * a.n_tasks, 0.01, 0)  # imports, first-call set-up
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for seed in range(a.repeats):
        start = time.perf_counter()
        out = generate(*args, seed)
        times.append(time.perf_counter() - start)
        del out
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before

    tracemalloc.start()
    out = generate(*args, 0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result_bytes = sum(x.nbytes for x in out)
    del out

    median = statistics.median(times)
    report = {
        "benchmark": "generate_scale",
        "shape": {"n_samples": a.n_samples, "n_features": a.n_features, "n_tasks": a.n_tasks},
        "seconds_median": round(median, 3),
        "seconds_all": [round(t, 3) for t in times],
        "seconds_ratio_to_target": round(median / TARGET_SECONDS, 3),
        "peak_extra_mib": round(peak / 2**20, 1),
        "returned_arrays_mib": round(result_bytes / 2**20, 1),
        "peak_rss_growth_mib": round(rss_growth / 2**20, 1),
        "memory_ratio_to_target": round(peak / TARGET_BYTES, 3),
    }
    print(json.dumps(report, indent=2))
    ok = median < TARGET_SECONDS and peak < TARGET_BYTES
    if not ok:
        print("generate_scale: target missed", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
