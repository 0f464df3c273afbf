"""Inference cost of the pretrained in-context models: seconds and peak memory per 1,000 test rows at
contexts of 1k / 8k / 50k training rows, one ensemble view, on the CPU (and on a CUDA device when there is
one and `--device cuda`).

Timing does not depend on the weights' values, so the models are built at the released architecture
(Orion-MSP: the checkpoint config's defaults; TabICL: its package's defaults) with random weights: these
runs measure cost only and produce no prediction anyone should read. Each setting runs in a fresh process,
so the peak resident memory (CPU) is that setting's; on CUDA, torch's peak allocated memory.

    python benchmarks/icl_inference.py [--contexts 1000 8000 50000] [--test-rows 1000] [--features 20]
        [--models orion_msp tabicl] [--device cpu] [--out results/benchmarks/icl_inference.json]

At full size this takes minutes per setting on a CPU and several GB at 50k rows; `--contexts 1000
--test-rows 200` is a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def measure(model: str, n_context: int, n_test: int, n_features: int, device: str) -> dict[str, float]:
    """One setting in this process: build, one warm-up call on a few rows, then the timed call."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    x_context = rng.normal(size=(n_context, n_features)).astype(np.float32)
    y_context = (x_context[:, 0] > 0).astype(np.int64)
    x_test = rng.normal(size=(n_test, n_features)).astype(np.float32)
    torch.manual_seed(0)
    if model == "orion_msp":
        from multitab.icl.context import predict_in_chunks
        from multitab.icl.orion_msp import OrionMSP

        net = OrionMSP().eval().to(device)  # the released config's architecture, random weights

        def run(rows: int) -> None:
            predict_in_chunks(lambda x, y: net(x.to(device), y.to(device)).cpu(), x_context, y_context,
                              x_test[:rows], chunk_size=rows, seed=0)
    else:
        import tabicl
        from tabicl._model import TabICL

        path = ROOT / ".cache" / "benchmarks" / "tabicl_random.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"config": {}, "state_dict": TabICL().state_dict()}, path)
        estimator = tabicl.TabICLClassifier(model_path=path, allow_auto_download=False, n_estimators=1,
                                            random_state=0, device=device, use_amp=False)
        estimator.fit(x_context, y_context)

        def run(rows: int) -> None:
            estimator.predict_proba(x_test[:rows])
    with torch.no_grad():
        run(min(8, n_test))
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        run(n_test)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"model": model, "context_rows": n_context, "test_rows": n_test, "features": n_features,
            "device": device, "seconds": seconds, "seconds_per_1000_test_rows": seconds * 1000 / n_test,
            "peak_memory_gb": peak / 1e9, "peak_memory_kind": "cuda allocated" if device == "cuda" else "max RSS"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contexts", type=int, nargs="+", default=[1000, 8000, 50000])
    p.add_argument("--test-rows", type=int, default=1000)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--models", nargs="+", default=["orion_msp", "tabicl"], choices=["orion_msp", "tabicl"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default=str(ROOT / "results" / "benchmarks" / "icl_inference.json"))
    p.add_argument("--one", nargs=2, metavar=("MODEL", "CONTEXT"), help=argparse.SUPPRESS)  # a child process
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.test_rows, args.features, args.device)))
        return 0
    rows = []
    started = time.perf_counter()
    for model in args.models:
        for n_context in args.contexts:
            child = subprocess.run(
                [sys.executable, __file__, "--one", model, str(n_context), "--test-rows", str(args.test_rows),
                 "--features", str(args.features), "--device", args.device],
                capture_output=True, text=True)
            if child.returncode != 0:
                print(f"{model} at {n_context} context rows failed:\n{child.stderr[-2000:]}", file=sys.stderr)
                return 1
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{model:10s} context {n_context:6d}: {r['seconds_per_1000_test_rows']:8.2f} s / 1,000 test rows, "
                  f"peak {r['peak_memory_gb']:.2f} GB ({r['peak_memory_kind']})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from multitab import provenance

    record = {
        "what": "inference cost of the pretrained in-context models at their released architectures with random "
                "weights (cost only, no prediction to read): seconds and peak memory per 1,000 test rows, one "
                "ensemble view, each setting in a fresh process with torch's default threads; "
                "see benchmarks/icl_inference.py",
        "machine": provenance.machine(),
        "load_average_at_end": list(os.getloadavg()),
        "commit": provenance.git_commit(ROOT),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
