"""Split + preprocess at the real Higgs size (11 M rows) on a stand-in: rows/second and peak memory.

Target: under 5 minutes and under 8 GB peak resident memory on a 2-core, 24 GB machine.
Each step runs in its own process so its peak resident set is measured alone (getrusage of the child).

    python benchmarks/preprocess_scale.py [--rows 11000000] [--workdir data/benchmark_preprocess]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from multitab.config import read_yaml

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 300.0
MEMORY_LIMIT_GB = 8.0


def _child(code: str, env: dict[str, str], peak_file: Path) -> tuple[float, float]:
    """Run python code in a fresh process; return (seconds, peak RSS in GB of that process alone)."""
    wrapped = (
        "import atexit, resource\n"
        f"atexit.register(lambda: open({str(peak_file)!r}, 'w').write("
        "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))\n" + code
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", wrapped], check=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - t0
    return seconds, int(peak_file.read_text()) / 1024**2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=11_000_000)
    ap.add_argument("--workdir", type=Path, default=ROOT / "data" / "benchmark_preprocess")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    a = ap.parse_args(argv)
    work = a.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    params = read_yaml(ROOT / "params.yaml")  # a mapping to write a changed copy from
    params["datasets"]["higgs"]["source"] = "standin"
    params["datasets"]["higgs"]["standin"]["rows"] = {"data": a.rows}
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    p = str(work / "params.yaml")

    gen_s, _ = _child(
        f"from stages.acquire import main; raise SystemExit(main(['--params', {p!r}, '--dataset', 'higgs', "
        f"'--out', {str(work / 'raw')!r}]))",
        env,
        work / 'gen.peak',
    )
    split_s, split_gb = _child(
        f"from stages.split import main; raise SystemExit(main(['--params', {p!r}, '--dataset', 'higgs', "
        f"'--raw', {str(work / 'raw')!r}, '--out', {str(work / 'splits')!r}]))",
        env,
        work / 'split.peak',
    )
    prep_s, prep_gb = _child(
        f"from stages.preprocess import main; raise SystemExit(main(['--params', {p!r}, '--dataset', 'higgs', "
        f"'--splits', {str(work / 'splits')!r}, '--out', {str(work / 'processed')!r}]))",
        env,
        work / 'prep.peak',
    )
    total = split_s + prep_s
    peak = max(split_gb, prep_gb)
    report = {
        "rows": a.rows,
        "standin_generation_s": round(gen_s, 1),
        "split_s": round(split_s, 1),
        "preprocess_s": round(prep_s, 1),
        "split_plus_preprocess_s": round(total, 1),
        "rows_per_second": round(a.rows / total),
        "peak_rss_gb": round(peak, 2),
        "time_ratio_to_limit": round(total / TIME_LIMIT_S, 3),
        "memory_ratio_to_limit": round(peak / MEMORY_LIMIT_GB, 3),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    ok = total < TIME_LIMIT_S and peak < MEMORY_LIMIT_GB
    print("PASS" if ok else "FAIL", f"split+preprocess {total:.0f}s (< {TIME_LIMIT_S:.0f}s), peak {peak:.2f} GB (< {MEMORY_LIMIT_GB} GB)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
