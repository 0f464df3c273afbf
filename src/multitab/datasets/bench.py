"""MultiTab-Bench: the paper's synthetic multitask dataset generator (section "MultiTab-Bench").

For t tasks with pairwise weight correlation p and per-task polynomial degrees PD_i:

1. P = (1 - p) I + p 11ᵀ (ones on the diagonal, p elsewhere), P = Q Λ Qᵀ (eigendecomposition);
2. W = Q Λ^½ Uᵀ with U a d×t matrix of orthonormal columns, so that w_iᵀw_j = P_ij: unit rows whose
   pairwise cosine similarity is exactly p (appendix "Proof of Cosine Similarity"); computed as P^½ Uᵀ
   (the same distribution, and the same W on every CPU: D13);
3. x ~ N(0, I_d) and y_i = Σ_{k=1..PD_i} (w_iᵀx)^k + ε_i with ε_i ~ N(0, σ_i²).

`generate` is the public entry point (its signature is fixed by ARCHITECTURE.md). `make_splits` turns one
generated dataset into the processed format shared with the real datasets (70/15/15 seeded split,
regression targets raw or standardised with train statistics, meta.json); `write_dataset` stores it
atomically.
The argument checks are in multitab.config.bench_checks; the label correlations of Figures 3 and 4 in
label_correlations.py; the typed `bench` params in multitab.config.bench.

Deviations from the paper's Listing 1, marked NOTE[DIFF] (docs/deviations.md D1, D2, D13) at the line:
- U comes from a QR factorisation: the listing's Gram-Schmidt step overwrites U[i] with its projection
  instead of subtracting it, so its U is not orthonormal (the authors' repository version is correct).
- Three independent random streams (U, x, ε) spawned from one seed: the same seed gives the same features
  whatever the tasks, and changing a noise level only rescales the same ε.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from multitab.config.bench import BenchConfig
from multitab.config.bench_checks import check_correlation, check_int, check_noise, validate
from multitab.config.data import PreprocessConfig, SplitConfig
from multitab.datasets.columnar import to_parquet
from multitab.datasets.schema import schema_from_meta
from multitab.datasets.split import SPLITS, split_frames
from multitab.files.io import atomic_dir, write_json

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------
# The generator.
def correlation_matrix(n_tasks: int, correlation: float) -> np.ndarray:
    """P: ones on the diagonal, `correlation` elsewhere; (n_tasks, n_tasks) float64."""
    p = check_correlation(correlation, check_int("n_tasks", n_tasks, 1))
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
    """W = P^½ Uᵀ = Q Λ^½ (U Q)ᵀ (paper eq. 6 with U Q for U): (n_tasks, n_features) float64, W Wᵀ = P.

    NOTE[DIFF] (docs/deviations.md D13): the symmetric square root P^½ = Q Λ^½ Qᵀ instead of Q Λ^½. P has a
    repeated eigenvalue (1 - p, t - 1 times), so eigh's Q is any basis of that eigenspace, and which one
    depends on the BLAS kernel: with t >= 4 the same seed gave different datasets on different CPUs. P^½
    is unique, and U Q is as Haar-random as U, so W has the paper's distribution."""
    eigvals, Q = np.linalg.eigh(P)
    # Eigenvalues of a PSD P may come out as -1e-16: clamp (P itself was validated).
    sqrt_eig = np.sqrt(np.clip(eigvals, 0.0, None))
    root = (Q * sqrt_eig) @ Q.T
    return np.asarray(root @ U.T)


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
    s = validate(n_samples, n_features, correlation, degrees, noise, seed)
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
    evaluation: Literal["held_out", "training_rows"] = "held_out",
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """One generated dataset -> processed train / val / test frames + meta.json, through the same split
    (`split_frames`, method "shuffle": a seeded permutation cut e.g. 70 / 15 / 15) and preprocessing
    (`preprocess`) code as the real datasets.

    Features x00.. stay as drawn (numerical transform "none": x ~ N(0, I) is already what the quantile
    transform gives the real datasets); regression targets y1.. stay raw (`targets`: "raw", the authors'
    code) or are standardised with train statistics ("standard"). `generator` (the arguments of
    `generate`) and W are recorded in meta.json.

    NOTE[DIFF] (docs/deviations.md O6): `evaluation="training_rows"` is the authors' loader: no split, every
    row trains, and validation and test are the very training rows (their test set is a copy of the training
    generator); the default "held_out" is the split above."""
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
    if evaluation == "training_rows":
        parts = {"train": data, "val": data.copy(), "test": data.copy()}
    else:
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
        "evaluation": evaluation,
        "split": None if evaluation == "training_rows" else {
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
            to_parquet(frames[split], tmp / f"{split}.parquet")
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
    evaluation: Literal["held_out", "training_rows"] = "held_out",
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """generate + make_splits: one processed MultiTab-Bench dataset in memory."""
    X, Y, W = generate(n_samples, n_features, correlation, degrees, noise, seed)
    noise_list = check_noise(noise, len(degrees)).tolist()
    gen_args = {
        "n_samples": n_samples,
        "n_features": n_features,
        "correlation": float(correlation),
        "degrees": [int(x) for x in degrees],
        "noise": noise_list,
        "seed": seed,
    }
    return make_splits(name, X, Y, W, generator=gen_args, split=split, targets=targets, evaluation=evaluation)


def synthesize_config(name: str, bench: BenchConfig, *, evaluation: Literal["held_out", "training_rows"] = "held_out",
                      seed: int | None = None, targets: Literal["raw", "standard"] | None = None,
                      ) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The processed dataset of `bench.configs.<name>`; meta.json also records its groups. The attribution
    study's options (multitab.config.attribution): `evaluation` (make_splits), `seed` (None: the configuration's;
    a run seed gives that run its own dataset) and `targets` (None: bench.data's)."""
    data, cfg = bench.data, bench.dataset(name)
    frames, meta = synthesize(
        name,
        n_samples=data.n_samples,
        n_features=data.n_features,
        correlation=cfg.correlation,
        degrees=cfg.degrees,
        noise=data.noise,
        seed=cfg.seed if seed is None else seed,
        split=data.split,
        targets=data.targets if targets is None else targets,
        evaluation=evaluation,
    )
    meta["generator"]["groups"] = list(cfg.groups)
    return frames, meta
