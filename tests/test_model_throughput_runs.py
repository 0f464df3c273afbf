"""The short training runs of benchmarks/model_throughput.py --bench-shapes go through the train stage's own
path (run_training with the run's hyperparameters): a change to that path's signature must not leave the
benchmark broken unnoticed, as it once was."""

from __future__ import annotations

import math

from _benchmarks import load_benchmark

mt = load_benchmark("model_throughput")


def test_bench_accuracy_trains_one_model_in_both_precisions():
    out = mt.bench_accuracy(["stl_mlp"], n_samples=1000, epochs=1, batch_size=512)
    assert set(out["runs"]) == {"stl_mlp/fp32", "stl_mlp/bf16"}
    for run in out["runs"].values():
        assert math.isfinite(run["test_ev_mean"]) and run["samples_per_second"] > 0
        shares = run["loop_share"] + run["validation_share"] + run["rest_share"]
        assert abs(shares - 1) < 0.01  # the wall time is split into its parts, nothing counted twice
