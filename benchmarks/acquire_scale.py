"""`source: local` at the real Higgs size: read a header-less HIGGS.csv.gz-format file (11 M rows x 29
columns, numbers written as the release writes them, `%.18e`) and write data/raw's Parquet. Reports
rows/second and the peak resident memory of the acquisition process alone.

The input is generated first (a 100k-row block repeated, gzip level 1; ~3.4 GB at 11 M rows, not timed).

    python benchmarks/acquire_scale.py [--rows 11000000] [--workdir data/benchmark_acquire] [--keep]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from multitab.config.data import LocalConfig  # noqa: E402
from multitab.datasets.schema import get_schema  # noqa: E402
from multitab.datasets.sources import acquire_local  # noqa: E402

BLOCK_ROWS = 100_000


def write_higgs_like(path: Path, rows: int, seed: int = 0) -> None:
    schema = get_schema("higgs")
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(BLOCK_ROWS, len(schema.raw_columns)))
    x[:, 0] = rng.integers(0, 2, BLOCK_ROWS)
    for j, c in enumerate(schema.raw_columns):
        f = next((f for f in schema.features if f.name == c.name), None)
        if f is not None and f.levels is not None:
            x[:, j] = rng.choice(f.levels, BLOCK_ROWS)
    buf = io.StringIO()
    np.savetxt(buf, x, fmt="%.18e", delimiter=",")
    lines = buf.getvalue().encode().splitlines(keepends=True)
    with gzip.open(path, "wb", compresslevel=1) as f:
        for start in range(0, rows, BLOCK_ROWS):
            f.write(b"".join(lines[: min(BLOCK_ROWS, rows - start)]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=11_000_000)
    p.add_argument("--workdir", type=Path, default=ROOT / "data" / "benchmark_acquire")
    p.add_argument("--keep", action="store_true", help="keep the generated input and output")
    a = p.parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    src = a.workdir / "HIGGS.csv.gz"
    if not src.exists():
        write_higgs_like(src, a.rows)
    t0 = time.perf_counter()
    info = acquire_local(get_schema("higgs"), LocalConfig(path=str(src)), a.workdir / "raw")
    seconds = time.perf_counter() - t0
    rows = info["files"]["data"]["rows"]
    result = {
        "rows": rows,
        "input_gz_gb": round(src.stat().st_size / 1e9, 3),
        "seconds": round(seconds, 1),
        "rows_per_second": round(rows / seconds),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
    }
    print(json.dumps(result, indent=2))
    if not a.keep:
        shutil.rmtree(a.workdir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
