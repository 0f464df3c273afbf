"""MultiTab-Bench: the paper's synthetic multitask dataset generator (section "MultiTab-Bench").

For t tasks with pairwise weight correlation p and per-task polynomial degrees PD_i:

1. P = (1 - p) I + p 11ᵀ (ones on the diagonal, p elsewhere), P = Q Λ Qᵀ (eigendecomposition);
2. W = Q Λ^½ Uᵀ with U a d×t matrix of orthonormal columns, so that w_iᵀw_j = P_ij: unit rows whose
   pairwise cosine similarity is exactly p (appendix "Proof of Cosine Similarity");
3. x ~ N(0, I_d) and y_i = Σ_{k=1..PD_i} (w_iᵀx)^k + ε_i with ε_i ~ N(0, σ_i²).

`generate` is the public entry point (its signature is fixed by ARCHITECTURE.md). `make_splits` turns one
generated dataset into the processed format shared with the real datasets (70/15/15 seeded split,
regression targets raw or standardised with train statistics, meta.json); `write_dataset` stores it
atomically.
`label_correlations` measures the label correlations plotted in the paper's Figures 3 and 4.

Deviations from the paper's Listing 1, marked NOTE[DIFF] (docs/deviations.md D1, D2) at the line:
- U comes from a QR factorisation: the listing's Gram-Schmidt step overwrites U[i] with its projection
  instead of subtracting it, so its U is not orthonormal (the authors' repository version is correct).
- Three independent random streams (U, x, ε) spawned from one seed: the same seed gives the same features
  whatever the tasks, and changing a noise level only rescales the same ε.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from multitab.config import ConfigError, section
from multitab.datasets.config import PreprocessConfig, SplitConfig
from multitab.datasets.schema import schema_from_meta
from multitab.datasets.split import SPLITS, split_frames
from multitab.io import atomic_dir, write_json

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------
# Validation: every invalid setting fails here, before any array is allocated.
def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}={value!r} must be an integer")
    if value < low:
        raise ValueError(f"{name}={value} must be >= {low}")
    return int(value)


def _check_degrees(degrees: Sequence[int]) -> tuple[int, ...]:
    if isinstance(degrees, str | bytes) or not isinstance(degrees, Sequence | np.ndarray):
        raise TypeError(f"degrees={degrees!r} must be a list of polynomial degrees, one per task")
    if len(degrees) == 0:
        raise ValueError("degrees=[] must list one polynomial degree per task (at least one task)")
    return tuple(_check_int(f"degrees[{i}]", d, 1) for i, d in enumerate(degrees))


def _check_correlation(correlation: float, n_tasks: int) -> float:
    if isinstance(correlation, bool) or not isinstance(correlation, int | float | np.floating | np.integer):
        raise TypeError(f"correlation={correlation!r} must be a number")
    p = float(correlation)
    # P = (1 - p) I + p 11ᵀ has eigenvalues 1 + (t - 1) p (once) and 1 - p (t - 1 times): it is positive
    # semidefinite, hence a valid Gram matrix, iff -1/(t - 1) <= p <= 1.
    low = -1.0 / (n_tasks - 1) if n_tasks > 1 else -1.0
    if not (math.isfinite(p) and low - 1e-12 <= p <= 1.0 + 1e-12):
        raise ValueError(
            f"correlation={correlation!r} is outside [{low:.6g}, 1]: with {n_tasks} tasks the matrix with "
            f"ones on the diagonal and p elsewhere is positive semidefinite only for -1/(t-1) <= p <= 1"
        )
    return min(max(p, low), 1.0)


def _check_noise(noise: float | Sequence[float], n_tasks: int) -> np.ndarray:
    if isinstance(noise, int | float | np.floating | np.integer) and not isinstance(noise, bool):
        levels = [float(noise)] * n_tasks
    elif isinstance(noise, Sequence | np.ndarray) and not isinstance(noise, str | bytes):
        if len(noise) != n_tasks:
            raise ValueError(f"noise has {len(noise)} levels but there are {n_tasks} tasks (len(degrees))")
        levels = []
        for i, s in enumerate(noise):
            if isinstance(s, bool) or not isinstance(s, int | float | np.floating | np.integer):
                raise TypeError(f"noise[{i}]={s!r} must be a number")
            levels.append(float(s))
    else:
        raise TypeError(f"noise={noise!r} must be a number or a list of numbers, one per task")
    for i, s in enumerate(levels):
        if not (math.isfinite(s) and s >= 0.0):
            raise ValueError(
                f"noise level {s!r} of task {i + 1} must be finite and >= 0 (a standard deviation)"
            )
    return np.asarray(levels, dtype=np.float64)


@dataclass(frozen=True)
class _Setting:
    n_samples: int
    n_features: int
    correlation: float
    degrees: tuple[int, ...]
    noise: np.ndarray  # (n_tasks,) standard deviations
    seed: int

    @property
    def n_tasks(self) -> int:
        return len(self.degrees)


def _validate(
    n_samples: int,
    n_features: int,
    correlation: float,
    degrees: Sequence[int],
    noise: float | Sequence[float],
    seed: int,
) -> _Setting:
    n_samples = _check_int("n_samples", n_samples, 1)
    n_features = _check_int("n_features", n_features, 1)
    degrees_ = _check_degrees(degrees)
    t = len(degrees_)
    if t > n_features:
        raise ValueError(
            f"{t} tasks need {t} orthonormal directions, but n_features={n_features} < {t}: "
            "use at least as many features as tasks"
        )
    return _Setting(
        n_samples=n_samples,
        n_features=n_features,
        correlation=_check_correlation(correlation, t),
        degrees=degrees_,
        noise=_check_noise(noise, t),
        seed=_check_int("seed", seed, 0),
    )


# ------------------------------------------------------------------------------------------------------
# The generator.
def correlation_matrix(n_tasks: int, correlation: float) -> np.ndarray:
    """P: ones on the diagonal, `correlation` elsewhere; (n_tasks, n_tasks) float64."""
    p = _check_correlation(correlation, _check_int("n_tasks", n_tasks, 1))
    P = np.full((n_tasks, n_tasks), p, dtype=np.float64)
    np.fill_diagonal(P, 1.0)
    return P


def orthonormal_columns(n_features: int, n_tasks: int, rng: np.random.Generator) -> np.ndarray:
    """U: a Haar-random (n_features, n_tasks) matrix with orthonormal columns."""
    # NOTE[DIFF] (docs/deviations.md D1): QR instead of the listing's Gram-Schmidt loop, which is broken (see
    # module docstring).
    A = rng.standard_normal((n_features, n_tasks))
    Qa, R = np.linalg.qr(A)  # reduced: Qa is (d, t)
    # Fixing the signs by diag(R) makes the distribution of U uniform (Haar), not just orthonormal.
    signs = np.sign(np.diag(R))
    signs[signs == 0] = 1.0
    return np.asarray(Qa * signs)


def weight_matrix(P: np.ndarray, U: np.ndarray) -> np.ndarray:
    """W = Q Λ^½ Uᵀ (paper eq. 6): (n_tasks, n_features) float64 with W Wᵀ = P."""
    eigvals, Q = np.linalg.eigh(P)
    # Eigenvalues of a PSD P may come out as -1e-16: clamp (P itself was validated).
    sqrt_eig = np.sqrt(np.clip(eigvals, 0.0, None))
    return np.asarray((Q * sqrt_eig) @ U.T)


def polynomial_labels(
    Z: np.ndarray, degrees: Sequence[int], noise: np.ndarray, eps: np.ndarray
) -> np.ndarray:
    """Y[i] = Σ_{k=1..degrees[i]} Z[i]^k + noise[i] · eps[i]; Z, eps: (n_tasks, n) -> (n_tasks, n).

    Horner's rule, z(1 + z(1 + ...)), in place, one task row at a time (rows are contiguous)."""
    Y = np.empty_like(Z)
    tmp = np.empty_like(Z[0])
    for i, degree in enumerate(degrees):
        z, y = Z[i], Y[i]
        y.fill(1.0)
        for _ in range(degree - 1):
            np.multiply(y, z, out=tmp)
            np.add(tmp, 1.0, out=y)
        np.multiply(y, z, out=y)
        if noise[i] != 0.0:
            np.multiply(eps[i], Z.dtype.type(noise[i]), out=tmp)
            np.add(y, tmp, out=y)
    return Y


def generate(
    n_samples: int,
    n_features: int,
    correlation: float,
    degrees: Sequence[int],
    noise: float | Sequence[float],
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One MultiTab-Bench dataset.

    Args:
        n_samples: rows n >= 1.
        n_features: input features d >= number of tasks.
        correlation: pairwise cosine similarity p of the task weight vectors, -1/(t-1) <= p <= 1.
        degrees: polynomial degree PD_i >= 1 of each task; the number of tasks t is len(degrees).
        noise: standard deviation σ_i of the label noise: one number for all tasks or one per task.
        seed: non-negative integer; the same arguments give identical arrays.

    Returns:
        X: (n, d) float32, x ~ N(0, I_d);
        Y: (n, t) float32, y_i = Σ_{k=1..PD_i} (w_iᵀx)^k + ε_i;
        W: (t, d) float64, unit rows with pairwise cosine similarity p.

    Raises:
        ValueError / TypeError naming the bad argument, before any work.
    """
    s = _validate(n_samples, n_features, correlation, degrees, noise, seed)
    # NOTE[DIFF] (docs/deviations.md D2): one stream per random quantity (the listing draws all from torch's
    # global generator).
    rng_u, rng_x, rng_eps = (np.random.default_rng(c) for c in np.random.SeedSequence(s.seed).spawn(3))
    W = weight_matrix(
        correlation_matrix(s.n_tasks, s.correlation), orthonormal_columns(s.n_features, s.n_tasks, rng_u)
    )
    X = rng_x.standard_normal((s.n_samples, s.n_features), dtype=np.float32)
    # (t, n): the projections of each task as contiguous rows. einsum's own loop, not BLAS: as fast for
    # these thin products and free of the thread start-up that dominates small ones on a busy machine.
    Z = np.einsum("td,nd->tn", W.astype(np.float32), X)
    eps = rng_eps.standard_normal((s.n_tasks, s.n_samples), dtype=np.float32)
    Y = polynomial_labels(Z, s.degrees, s.noise, eps)
    del Z, eps
    return X, np.ascontiguousarray(Y.T), W


# ------------------------------------------------------------------------------------------------------
# Processed format (same as data/processed/<dataset>/ of the real datasets).
def feature_names(n_features: int) -> list[str]:
    width = max(2, len(str(n_features - 1)))
    return [f"x{i:0{width}d}" for i in range(n_features)]


def task_names(n_tasks: int) -> list[str]:
    return [f"y{i + 1}" for i in range(n_tasks)]


def make_splits(
    name: str,
    X: np.ndarray,
    Y: np.ndarray,
    W: np.ndarray,
    *,
    generator: dict[str, Any],
    split: SplitConfig,
    targets: Literal["raw", "standard"] = "raw",
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """One generated dataset -> processed train / val / test frames + meta.json, through the same split
    (`split_frames`, method "shuffle": a seeded permutation cut e.g. 70 / 15 / 15) and preprocessing
    (`preprocess`) code as the real datasets.

    Features x00.. stay as drawn (numerical transform "none": x ~ N(0, I) is already what the quantile
    transform gives the real datasets); regression targets y1.. stay raw (`targets`: "raw", the authors'
    code) or are standardised with train statistics ("standard"). `generator` (the arguments of
    `generate`) and W are recorded in meta.json."""
    if split.method != "shuffle":
        raise ValueError(
            f"dataset {name!r}: split method {split.method!r}; MultiTab-Bench rows are i.i.d., use 'shuffle'"
        )
    n, d = X.shape
    t = Y.shape[1]
    f_names, t_names = feature_names(d), task_names(t)
    stub = {
        "dataset": name,
        "features": [{"name": f, "kind": "numerical", "cardinality": None} for f in f_names],
        "tasks": [{"name": tn, "type": "regression", "n_classes": None} for tn in t_names],
    }
    from multitab.datasets.preprocess import preprocess  # scikit-learn: imported only when splitting

    schema = schema_from_meta(stub)
    data = pd.DataFrame(X, columns=f_names, copy=False)
    for j, tn in enumerate(t_names):
        data[tn] = Y[:, j]
    parts = split_frames(schema, {"data": data}, split)
    del data
    # Not a stand-in for real data: MultiTab-Bench data is synthetic by design (paper, Figures 5 and 6).
    result = preprocess(
        schema,
        parts,
        PreprocessConfig(numerical="none", targets=targets),
        {"source": "synthetic", "standin": False},
    )
    meta = result.meta
    meta["inputs"] = {}  # generated from the recorded arguments: no input files
    meta["generator"] = {
        **generator,
        "split": {
            "method": split.method,
            "seed": split.seed,
            "val_fraction": split.val_fraction,
            "test_fraction": split.test_fraction,
        },
        "weights": W.tolist(),
    }
    return result.frames, meta


def write_dataset(out: str | Path, frames: dict[str, pd.DataFrame], meta: dict[str, Any]) -> None:
    """Write {train,val,test}.parquet + meta.json into `out` as a whole (atomic folder swap)."""
    with atomic_dir(out) as tmp:
        for split in SPLITS:
            frames[split].to_parquet(tmp / f"{split}.parquet", index=False)
        write_json(tmp / "meta.json", meta)


def synthesize(
    name: str,
    *,
    n_samples: int,
    n_features: int,
    correlation: float,
    degrees: Sequence[int],
    noise: float | Sequence[float],
    seed: int,
    split: SplitConfig,
    targets: Literal["raw", "standard"] = "raw",
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """generate + make_splits: one processed MultiTab-Bench dataset in memory."""
    X, Y, W = generate(n_samples, n_features, correlation, degrees, noise, seed)
    noise_list = _check_noise(noise, len(degrees)).tolist()
    gen_args = {
        "n_samples": n_samples,
        "n_features": n_features,
        "correlation": float(correlation),
        "degrees": [int(x) for x in degrees],
        "noise": noise_list,
        "seed": seed,
    }
    return make_splits(name, X, Y, W, generator=gen_args, split=split, targets=targets)


# ------------------------------------------------------------------------------------------------------
# Figures 3 and 4: label correlation as a function of p.
def pairwise_correlations(Y: np.ndarray) -> np.ndarray:
    """Pearson correlations of the label columns of Y (n, t), upper triangle in (i, j) order: (t(t-1)/2,)."""
    C = np.corrcoef(Y, rowvar=False)
    i, j = np.triu_indices(Y.shape[1], k=1)
    return np.asarray(C[i, j])


def expected_label_correlation(
    degree_i: int, degree_j: int, correlation: float, noise_i: float = 0.0, noise_j: float = 0.0
) -> float:
    """The exact Pearson correlation of y_i and y_j (population value, no sampling error).

    z_i = w_iᵀx and z_j = w_jᵀx are standard normal with correlation p (unit rows, cosine p). Expanding
    f(z) = Σ_{k=1..PD} z^k in probabilists' Hermite polynomials, f = Σ_m a_m He_m, and using
    E[He_m(z_i) He_n(z_j)] = δ_mn m! p^m (Mehler): cov = Σ_{m>=1} a_m b_m m! p^m, var = Σ_{m>=1} a_m² m! + σ²."""
    degree_i = _check_int("degree_i", degree_i, 1)
    degree_j = _check_int("degree_j", degree_j, 1)
    p = _check_correlation(correlation, 2)
    a = np.polynomial.hermite_e.poly2herme([0.0] + [1.0] * degree_i)
    b = np.polynomial.hermite_e.poly2herme([0.0] + [1.0] * degree_j)
    m = np.arange(max(len(a), len(b)))
    a = np.pad(a, (0, len(m) - len(a)))
    b = np.pad(b, (0, len(m) - len(b)))
    fact = np.array([math.factorial(int(k)) for k in m], dtype=np.float64)
    cov = float(np.sum((a * b * fact * p**m)[1:]))
    var_i = float(np.sum((a * a * fact)[1:])) + noise_i**2
    var_j = float(np.sum((b * b * fact)[1:])) + noise_j**2
    return cov / math.sqrt(var_i * var_j)


def label_correlations(
    degrees: Sequence[int],
    grid: Sequence[float] | np.ndarray,
    *,
    n_datasets: int,
    n_samples: int,
    n_features: int,
    noise: float | Sequence[float],
    seed: int,
) -> np.ndarray:
    """Pairwise label correlations of `n_datasets` independent datasets per correlation in `grid`.

    Each dataset is a full `generate` call (dataset k at grid point g has its own seed), so this measures
    exactly what the generator produces. Returns (len(grid), n_datasets, n_pairs) with pairs in
    `np.triu_indices(t, 1)` order."""
    degrees_ = _check_degrees(degrees)
    t = len(degrees_)
    if t < 2:
        raise ValueError(f"degrees={list(degrees_)}: label correlations need at least two tasks")
    n_datasets = _check_int("n_datasets", n_datasets, 2)
    seed = _check_int("seed", seed, 0)
    for p in grid:
        _check_correlation(p, t)
    _validate(n_samples, n_features, 0.0, degrees_, noise, seed)
    out = np.empty((len(grid), n_datasets, t * (t - 1) // 2))
    seeds = np.random.SeedSequence(seed).generate_state(len(grid) * n_datasets).reshape(len(grid), n_datasets)
    for g, p in enumerate(grid):
        for k in range(n_datasets):
            _, Y, _ = generate(n_samples, n_features, float(p), degrees_, noise, int(seeds[g, k]))
            out[g, k] = pairwise_correlations(Y)
    return out


# ------------------------------------------------------------------------------------------------------
# Typed params: `bench.data`, `bench.configs.<name>` (stage synthesize@<name>), `bench.label_correlations`.
Group = Literal["correlation", "complexity", "count", "nonuniform"]


@dataclass(frozen=True)
class BenchDataConfig:
    """Settings shared by every MultiTab-Bench dataset (paper: 1,000,000 samples, 32 features, noise 0.01)."""

    n_samples: int
    n_features: int
    noise: float
    split: SplitConfig
    # Regression targets raw (default: the authors' code) or standardised with train statistics.
    targets: Literal["raw", "standard"] = "raw"


@dataclass(frozen=True)
class BenchDatasetConfig:
    """One dataset. `groups`: the variations of the paper it belongs to (Figure 5: correlation, complexity,
    count; Figure 6: nonuniform); the varied factor is read from its own fields: correlation (p), complexity
    (degrees), count (len(degrees)). One dataset may serve several groups (p 0.6, PD [3,3,3], t 3)."""

    groups: tuple[Group, ...]
    correlation: float
    degrees: tuple[int, ...]
    seed: int

    @property
    def n_tasks(self) -> int:
        return len(self.degrees)


@dataclass(frozen=True)
class LabelCorrelationConfig:
    """Figures 3 and 4: `n_datasets` datasets of `n_samples` rows per p on a grid of `grid_points` points
    from 0 to 1. Figure 3: PD = [k] * t for k in `figure3_degrees`, t in `figure3_n_tasks`; Figure 4: each
    degree list of `figure4_degrees`."""

    n_datasets: int
    n_samples: int
    n_features: int
    noise: float
    grid_points: int
    seed: int
    figure3_degrees: tuple[int, ...]
    figure3_n_tasks: tuple[int, ...]
    figure4_degrees: tuple[tuple[int, ...], ...]

    @property
    def grid(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, _check_int("grid_points", self.grid_points, 2))


def load_bench_data(params: dict[str, Any], source: str = "params.yaml") -> BenchDataConfig:
    cfg = section(params, "bench.data", BenchDataConfig, source=source)
    _validate(cfg.n_samples, cfg.n_features, 0.0, [1], cfg.noise, 0)
    return cfg


def load_bench_dataset(params: dict[str, Any], name: str, source: str = "params.yaml") -> BenchDatasetConfig:
    """`bench.configs.<name>`, checked against the shared settings (errors name the config)."""
    configs = params.get("bench", {}).get("configs", {})
    if name not in configs:
        raise ConfigError(
            f"{source}: no MultiTab-Bench config {name!r} under bench.configs; known: {sorted(configs)}"
        )
    cfg = section(params, f"bench.configs.{name}", BenchDatasetConfig, source=source)
    data = load_bench_data(params, source)
    try:
        if not cfg.groups:
            raise ValueError("groups=[] must name at least one variation")
        _validate(data.n_samples, data.n_features, cfg.correlation, cfg.degrees, data.noise, cfg.seed)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{source}:bench.configs.{name}: {e}") from None
    return cfg


def load_label_correlation_config(
    params: dict[str, Any], source: str = "params.yaml"
) -> LabelCorrelationConfig:
    cfg = section(params, "bench.label_correlations", LabelCorrelationConfig, source=source)
    where = f"{source}:bench.label_correlations"
    try:
        _check_int("n_datasets", cfg.n_datasets, 2)
        _check_int("grid_points", cfg.grid_points, 2)
        all_degrees = [[k] * t for k in cfg.figure3_degrees for t in cfg.figure3_n_tasks] + [
            list(d) for d in cfg.figure4_degrees
        ]
        for degrees in all_degrees:
            if len(degrees) < 2:
                raise ValueError(f"degrees={degrees}: label correlations need at least two tasks")
            _validate(cfg.n_samples, cfg.n_features, 0.0, degrees, cfg.noise, cfg.seed)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    return cfg


def synthesize_config(
    name: str, params: dict[str, Any], source: str = "params.yaml"
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The processed dataset of `bench.configs.<name>`; meta.json also records its groups."""
    data = load_bench_data(params, source)
    cfg = load_bench_dataset(params, name, source)
    frames, meta = synthesize(
        name,
        n_samples=data.n_samples,
        n_features=data.n_features,
        correlation=cfg.correlation,
        degrees=cfg.degrees,
        noise=data.noise,
        seed=cfg.seed,
        split=data.split,
        targets=data.targets,
    )
    meta["generator"]["groups"] = list(cfg.groups)
    return frames, meta


# ------------------------------------------------------------------------------------------------------
# Command line: one dataset from explicit arguments (the DVC stages use stages/synthesize.py instead).
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m multitab.datasets.bench",
        description="Generate one MultiTab-Bench dataset and write it in the processed format: "
        "OUT/{train,val,test}.parquet (features x00.., regression targets y1..) and OUT/meta.json.",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (replaced as a whole)")
    parser.add_argument("--name", default=None, help="dataset name in meta.json (default: the folder name)")
    parser.add_argument("--n-samples", type=int, default=1_000_000, help="rows (paper: 1,000,000)")
    parser.add_argument("--n-features", type=int, default=32, help="features d (paper: 32)")
    parser.add_argument(
        "--correlation", type=float, required=True, help="pairwise weight cosine similarity p"
    )
    parser.add_argument("--degrees", type=int, nargs="+", required=True, help="polynomial degree per task")
    parser.add_argument(
        "--noise", type=float, nargs="+", default=[0.01], help="noise std: one, or one per task"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--val-fraction", type=float, default=0.15)
    parser.add_argument("--test-fraction", type=float, default=0.15)
    parser.add_argument("--targets", choices=["raw", "standard"], default="raw", help="regression targets")
    args = parser.parse_args(argv)
    noise: float | list[float] = args.noise[0] if len(args.noise) == 1 else args.noise
    try:
        frames, meta = synthesize(
            args.name or args.out.name,
            n_samples=args.n_samples,
            n_features=args.n_features,
            correlation=args.correlation,
            degrees=args.degrees,
            noise=noise,
            seed=args.seed,
            split=SplitConfig(
                method="shuffle",
                seed=args.split_seed,
                val_fraction=args.val_fraction,
                test_fraction=args.test_fraction,
            ),
            targets=args.targets,
        )
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    write_dataset(args.out, frames, meta)
    print(f"wrote {args.out}: {meta['n_rows']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
