"""SHA-256 of MultiTab-Bench data as the synthesize stage makes it, per configuration and split: to say "same
data" of runs made at two commits only after comparing hashes (issue 47 reuses the eight-arm record's runs).

    python benchmarks/bench_data_hashes.py [--params params.yaml] [--n-samples 100000] [--configs p04_pdmix_t7 ...]
        [--evaluation held_out] [--targets standard] [--seed S]

Run it once with this checkout and once with another commit's `src` first on PYTHONPATH (with that commit's
params.yaml); equal lines are equal data (column names and every column's bytes, in order). Prints which
multitab it imported first.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib

import numpy as np


def main() -> None:
    import multitab
    from multitab.config import load_params
    from multitab.datasets.bench import synthesize_config

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--n-samples", type=int, default=100_000)
    p.add_argument("--configs", nargs="+", default=["p04_pdmix_t7", "p06_pd3_t3"])
    p.add_argument("--evaluation", default="held_out", choices=["held_out", "training_rows"])
    p.add_argument("--targets", default="standard", choices=["raw", "standard"])
    p.add_argument("--seed", type=int, default=None, help="a run seed's data (default: the configuration's seed)")
    a = p.parse_args()
    print(f"multitab: {multitab.__file__}")
    bench = load_params(a.params).bench
    bench = dataclasses.replace(bench, data=dataclasses.replace(bench.data, n_samples=a.n_samples))
    for name in a.configs:
        frames, _ = synthesize_config(name, bench, evaluation=a.evaluation, targets=a.targets, seed=a.seed)
        for split in ("train", "val", "test"):
            frame, digest = frames[split], hashlib.sha256()
            for column in frame.columns:
                digest.update(column.encode())
                digest.update(np.ascontiguousarray(frame[column].to_numpy()).tobytes())
            print(f"{name} {split} {frame.shape[0]}x{frame.shape[1]} {digest.hexdigest()}")


if __name__ == "__main__":
    main()
