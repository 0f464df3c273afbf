"""MultiTab-Bench generator: the weight construction (paper: "Proof of Cosine Similarity"), labels,
determinism, validation, and the label correlations behind Figures 3 and 4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multitab.datasets.bench import generate
from multitab.datasets.label_correlations import (
    expected_label_correlation,
    label_correlations,
    pairwise_correlations,
)


def _cosines(W: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(W, axis=1)
    return (W @ W.T) / np.outer(norms, norms)


# ---------------------------------------------------------------------------------------------------
# W: unit rows, pairwise cosine exactly p.
@pytest.mark.parametrize("t", [1, 2, 3, 5, 7, 16])
@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("p", [0.0, 0.2, 0.6, 0.999, 1.0, -0.05])
def test_weights_unit_rows_and_cosine_p(t: int, d: int, p: float) -> None:
    if t > d:
        pytest.skip("t > d is invalid (tested below)")
    _, _, W = generate(5, d, p, [1] * t, 0.0, seed=t * 100 + d)
    assert W.shape == (t, d)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1.0, atol=1e-6)
    C = _cosines(W)
    off = ~np.eye(t, dtype=bool)
    np.testing.assert_allclose(C[off], p, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_weights_property(data: st.DataObject) -> None:
    t = data.draw(st.integers(1, 10), label="t")
    d = data.draw(st.integers(t, 48), label="d")
    low = -1.0 / (t - 1) if t > 1 else -1.0
    p = data.draw(st.one_of(st.sampled_from([low, 0.0, 1.0]), st.floats(low, 1.0)), label="p")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    _, _, W = generate(3, d, p, [2] * t, 0.01, seed)
    np.testing.assert_allclose(W @ W.T, np.where(np.eye(t, dtype=bool), 1.0, p), atol=1e-6)


def test_weights_span_a_random_subspace() -> None:
    # U is drawn afresh per seed: the rows of W are not tied to the coordinate axes.
    _, _, W1 = generate(5, 32, 0.5, [1, 1, 1], 0.0, seed=1)
    _, _, W2 = generate(5, 32, 0.5, [1, 1, 1], 0.0, seed=2)
    assert not np.allclose(W1, W2)
    assert np.count_nonzero(np.abs(W1) > 1e-3) > 0.9 * W1.size


# ---------------------------------------------------------------------------------------------------
# X and Y.
def test_shapes_dtypes_and_labels_follow_the_formula() -> None:
    degrees = [1, 2, 3, 5]
    X, Y, W = generate(4000, 12, 0.3, degrees, 0.0, seed=7)
    assert X.shape == (4000, 12) and X.dtype == np.float32
    assert Y.shape == (4000, 4) and Y.dtype == np.float32
    assert W.dtype == np.float64
    Z = X.astype(np.float64) @ W.T
    expected = np.stack([sum(Z[:, i] ** k for k in range(1, pd + 1)) for i, pd in enumerate(degrees)], axis=1)
    np.testing.assert_allclose(Y, expected, rtol=1e-4, atol=1e-4)


def test_features_are_standard_normal() -> None:
    X, _, _ = generate(50_000, 8, 0.5, [1, 1], 0.0, seed=3)
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=0.03)
    np.testing.assert_allclose(np.cov(X, rowvar=False), np.eye(8), atol=0.03)


def test_noise_levels_per_task() -> None:
    noise = [0.0, 0.1, 1.0]
    X, Y, W = generate(40_000, 8, 0.2, [1, 1, 1], noise, seed=5)
    resid = Y.astype(np.float64) - X.astype(np.float64) @ W.T
    assert np.abs(resid[:, 0]).max() < 1e-5
    np.testing.assert_allclose(resid[:, 1:].std(axis=0), noise[1:], rtol=0.03)
    # a scalar noise applies to every task
    X, Y, W = generate(40_000, 8, 0.2, [1, 1, 1], 0.5, seed=5)
    np.testing.assert_allclose((Y - X @ W.T.astype(np.float32)).std(axis=0), 0.5, rtol=0.03)


def test_same_seed_same_arrays_other_seed_other_arrays() -> None:
    a = generate(2000, 16, 0.4, [1, 3, 2], [0.01, 0.1, 0.0], seed=11)
    b = generate(2000, 16, 0.4, [1, 3, 2], [0.01, 0.1, 0.0], seed=11)
    c = generate(2000, 16, 0.4, [1, 3, 2], [0.01, 0.1, 0.0], seed=12)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a, c):
        assert not np.array_equal(x, y)


def test_features_do_not_depend_on_the_tasks() -> None:
    # Separate random streams: the same seed gives the same X whatever p, the degrees or the noise.
    X1, _, _ = generate(500, 16, 0.2, [3, 3, 3], 0.01, seed=4)
    X2, _, _ = generate(500, 16, 0.9, [1, 5, 2, 4, 4], 0.5, seed=4)
    np.testing.assert_array_equal(X1, X2)


# ---------------------------------------------------------------------------------------------------
# Validation: the documented error, before any work (n_samples = 10**12 would exhaust memory).
HUGE = 10**12


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            dict(correlation=-0.51, degrees=[1, 1, 1]),
            ValueError,
            r"correlation=-0\.51 is outside \[-0\.5, 1\]",
        ),
        (dict(correlation=-0.26, degrees=[1] * 5), ValueError, "outside"),
        (dict(correlation=1.01), ValueError, "outside"),
        (dict(correlation=float("nan")), ValueError, "outside"),
        (dict(correlation=float("inf")), ValueError, "outside"),
        (dict(correlation="0.5"), TypeError, "correlation"),
        (dict(n_features=2, degrees=[1, 1, 1]), ValueError, "n_features=2 < 3"),
        (dict(degrees=[]), ValueError, "at least one task"),
        (dict(degrees=[1, 0, 2]), ValueError, r"degrees\[1\]=0 must be >= 1"),
        (dict(degrees=[1, 2.5]), TypeError, r"degrees\[1\]"),
        (dict(degrees=3), TypeError, "list of polynomial degrees"),
        (dict(noise=-0.01), ValueError, "must be finite and >= 0"),
        (dict(noise=[0.01, -1.0]), ValueError, "task 2"),
        (dict(noise=[0.01, 0.01, 0.01]), ValueError, "3 levels but there are 2 tasks"),
        (dict(noise=float("nan")), ValueError, "finite"),
        (dict(n_samples=0), ValueError, "n_samples=0 must be >= 1"),
        (dict(n_samples=-5), ValueError, "n_samples"),
        (dict(n_samples=10.0), TypeError, "n_samples"),
        (dict(n_features=0), ValueError, "n_features=0"),
        (dict(seed=-1), ValueError, "seed=-1"),
    ],
)
def test_invalid_settings_raise_before_work(kwargs: dict, error: type[Exception], match: str) -> None:
    args = dict(n_samples=HUGE, n_features=32, correlation=0.5, degrees=[1, 1], noise=0.01, seed=0)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        generate(**args)


def test_boundary_correlations_are_valid() -> None:
    # p = -1/(t-1) makes P singular but still a Gram matrix; t = 1 accepts any p in [-1, 1].
    _, _, W = generate(10, 8, -0.25, [1] * 5, 0.0, seed=0)
    np.testing.assert_allclose(W @ W.T, np.where(np.eye(5, dtype=bool), 1.0, -0.25), atol=1e-6)
    generate(10, 8, -1.0, [2], 0.0, seed=0)


# ---------------------------------------------------------------------------------------------------
# Label correlations (Figures 3 and 4).
@pytest.mark.parametrize("p", [0.0, 0.3, 0.6, 0.9, 1.0])
def test_degree_one_label_correlation_tracks_p(p: float) -> None:
    n = 20_000
    _, Y, _ = generate(n, 32, p, [1, 1], 0.0, seed=int(p * 10))
    r = pairwise_correlations(Y)[0]
    se = (1 - p**2) / math.sqrt(n) + 1e-6  # standard error of a Pearson correlation (normal data)
    assert abs(r - p) < 5 * se, (r, p)


@pytest.mark.parametrize(
    ("degrees", "p"),
    [((2, 2), 0.5), ((3, 3), 0.3), ((4, 4), 0.8), ((2, 3), 0.7), ((2, 4), 1.0), ((1, 3), 0.4)],
)
def test_label_correlation_matches_the_exact_value(degrees: tuple[int, int], p: float) -> None:
    values = label_correlations(degrees, [p], n_datasets=20, n_samples=5000, n_features=8, noise=0.01, seed=1)
    mean, sem = values.mean(), values.std(ddof=1) / math.sqrt(values.size)
    exact = expected_label_correlation(degrees[0], degrees[1], p, 0.01, 0.01)
    # heavy-tailed labels make the sample correlation slightly biased at high degree: allow 0.01 besides 5 sem
    assert abs(mean - exact) < 5 * sem + 0.01, (mean, exact, sem)


def test_exact_correlation_closed_forms() -> None:
    # y = z + z²: cov = p + 2p², var = 3; y = z + z² + z³: cov = 16p + 2p² + 6p³, var = 24.
    for p in (0.0, 0.1, 0.5, 1.0):
        assert expected_label_correlation(2, 2, p) == pytest.approx((p + 2 * p**2) / 3)
        assert expected_label_correlation(3, 3, p) == pytest.approx((16 * p + 2 * p**2 + 6 * p**3) / 24)
        assert expected_label_correlation(1, 1, p) == pytest.approx(p)
    assert expected_label_correlation(4, 4, 1.0, 1.0, 1.0) < 1.0


def test_label_correlations_shape_and_task_count_invariance() -> None:
    grid = [0.0, 0.5, 1.0]
    two = label_correlations([3, 3], grid, n_datasets=8, n_samples=4000, n_features=8, noise=0.01, seed=0)
    four = label_correlations(
        [3, 3, 3, 3], grid, n_datasets=8, n_samples=4000, n_features=8, noise=0.01, seed=1
    )
    assert two.shape == (3, 8, 1) and four.shape == (3, 8, 6)
    # Figure 3's claim: the mean correlation does not depend on the number of tasks.
    np.testing.assert_allclose(two.mean(axis=(1, 2)), four.mean(axis=(1, 2)), atol=0.03)
    np.testing.assert_allclose(two.mean(axis=(1, 2))[[0, 2]], [0.0, 1.0], atol=0.03)


def test_label_correlations_validates_first() -> None:
    with pytest.raises(ValueError, match="at least two tasks"):
        label_correlations([3], [0.5], n_datasets=2, n_samples=HUGE, n_features=8, noise=0.0, seed=0)
    with pytest.raises(ValueError, match="outside"):
        label_correlations([3, 3], [0.5, 1.5], n_datasets=2, n_samples=HUGE, n_features=8, noise=0.0, seed=0)


@pytest.mark.slow
def test_paper_scale_is_fast() -> None:
    import time

    start = time.perf_counter()
    X, Y, _ = generate(1_000_000, 32, 0.6, [3] * 7, 0.01, seed=0)
    assert time.perf_counter() - start < 3.0
    assert X.shape == (1_000_000, 32) and Y.shape == (1_000_000, 7)


def test_weight_matrix_does_not_depend_on_the_eigenbasis(monkeypatch: pytest.MonkeyPatch) -> None:
    """P's eigenvalue 1 - p repeats t - 1 times, so eigh may return any basis of its eigenspace (which one
    depended on the BLAS kernel, i.e. the CPU). W must come out the same for every such basis, and still
    satisfy W Wᵀ = P."""
    from multitab.datasets.bench import correlation_matrix, orthonormal_columns, weight_matrix

    t = 5
    P = correlation_matrix(t, 0.6)
    U = orthonormal_columns(32, t, np.random.default_rng(0))
    reference = weight_matrix(P, U)
    assert np.allclose(reference @ reference.T, P, atol=1e-12)
    eigh = np.linalg.eigh
    w, Q = eigh(P)
    repeated = np.isclose(w, 1 - 0.6)
    assert repeated.sum() == t - 1
    # another orthonormal basis of the repeated eigenspace: a random rotation within it
    R, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((t - 1, t - 1)))
    other = Q.copy()
    other[:, repeated] = Q[:, repeated] @ R
    assert not np.allclose(other, Q)
    monkeypatch.setattr(np.linalg, "eigh", lambda a: (w, other))
    assert np.allclose(weight_matrix(P, U), reference, atol=1e-12)
