"""The stand-in's bytes do not depend on the CPU: dvc.lock records their hash, so a clone on a CPU with other
SIMD kernels would otherwise re-run `acquire` (and everything after it) for nothing.

numpy chooses a kernel per CPU for its transcendental functions (NPY_DISABLE_CPU_FEATURES turns the faster
ones off) and OpenBLAS one for matrix products (OPENBLAS_CORETYPE picks an older one): a subprocess with
both restricted must write the same bytes as this process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multitab.datasets.schema import get_schema
from multitab.datasets.standin import write_standin

ROWS = {"aliexpress": {"train": 2000, "test": 500}, "acs_income": {"data": 2000}, "higgs": {"data": 2000}}
SEED = 7
WRITE = (
    "import sys; from pathlib import Path; from multitab.datasets.schema import get_schema; "
    "from multitab.datasets.standin import write_standin; "
    f"[write_standin(get_schema(n), r, {SEED}, Path(sys.argv[1]) / n) for n, r in {ROWS!r}.items()]"
)


def _dispatch_targets_here() -> list[str]:
    """numpy's dispatch targets (X86_V3 = AVX2 + FMA3, X86_V4 = AVX-512 ...) this CPU has."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]


def test_standin_bytes_do_not_depend_on_the_cpu_kernels(tmp_path: Path) -> None:
    targets = _dispatch_targets_here()
    if not targets:
        pytest.skip(f"numpy {np.__version__} dispatches no faster kernel on this CPU: nothing to turn off")
    for name, rows in ROWS.items():
        write_standin(get_schema(name), rows, SEED, tmp_path / "here" / name)
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(targets), "OPENBLAS_CORETYPE": "Prescott"}
    probe = "from numpy._core._multiarray_umath import __cpu_features__ as f; import sys; "
    probe += f"sys.exit(any(f[t] for t in {targets!r}))"
    assert subprocess.run([sys.executable, "-c", probe], env=env).returncode == 0, (
        f"NPY_DISABLE_CPU_FEATURES={targets} did not turn the kernels off: the comparison would mean nothing"
    )
    subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / "restricted")], env=env, check=True, timeout=300)
    here = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*.parquet"))
    assert len(here) == 4
    differ = [str(p) for p in here
              if (tmp_path / "here" / p).read_bytes() != (tmp_path / "restricted" / p).read_bytes()]
    assert not differ, (
        f"stand-in files {differ} differ when numpy's {targets} kernels and OpenBLAS' CPU kernels are turned off"
    )
