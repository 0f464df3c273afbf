"""Predicting with a pretrained in-context model: which training rows form the context, how test rows are
batched, and Orion-MSP's ensemble of table views.

- `context_rows`: at most `max_rows` training rows, a uniform sample without replacement drawn with
  `numpy.random.default_rng(seed)` (all rows when there are fewer), in their original order.
- `predict_in_chunks`: the test rows in a seeded random order, cut into chunks of `chunk_size`, each chunk
  predicted beside the whole context. A model whose test rows see each other (Orion-MSP's released
  memory, docs/deviations.md D21) then gives numbers that depend on the seed and the chunk size, both in
  params and metrics.json, and not on how a machine batches.
- `OrionMSPEnsemble`: the released wrapper's recipe in our words (tabtune 0.2.1, OrionMSPClassifier and its
  EnsembleGenerator): every view scales the columns (train mean and std, clipped to +-100), optionally
  applies a Yeo-Johnson power transform, soft-clips outliers beyond 4 (twice-estimated) standard
  deviations, permutes the columns and cyclically shifts the class labels; the views' logits are un-shifted,
  averaged, and turned into probabilities with temperature 0.9.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.preprocessing import PowerTransformer

Logits = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (1, T, H), (1, n_train) -> (1, T_test, C)


def context_rows(n_train: int, max_rows: int, seed: int) -> np.ndarray:
    """Indices of the training rows used as context (see module docstring)."""
    if max_rows < 1:
        raise ValueError(f"{max_rows=} must be >= 1")
    if n_train <= max_rows:
        return np.arange(n_train)
    return np.sort(np.random.default_rng(seed).choice(n_train, size=max_rows, replace=False))


def predict_in_chunks(
    logits: Logits, x_context: np.ndarray, y_context: np.ndarray, x_test: np.ndarray, *, chunk_size: int, seed: int
) -> np.ndarray:
    """`logits` of every test row, chunk by chunk (see module docstring): (n_test, n_classes) float32."""
    if chunk_size < 1:
        raise ValueError(f"{chunk_size=} must be >= 1")
    # NOTE[DIFF] (docs/deviations.md D23): the released wrapper predicts every test row in one call
    order = np.random.default_rng(seed).permutation(len(x_test))
    context = torch.as_tensor(x_context, dtype=torch.float32)
    labels = torch.as_tensor(y_context, dtype=torch.float32)[None]
    out: np.ndarray | None = None
    with torch.no_grad():
        for start in range(0, len(order), chunk_size):
            rows = order[start : start + chunk_size]
            table = torch.cat([context, torch.as_tensor(x_test[rows], dtype=torch.float32)])[None]
            chunk = logits(table, labels)[0].float().numpy()
            if out is None:
                out = np.empty((len(x_test), chunk.shape[-1]), dtype=np.float32)
            out[rows] = chunk
    assert out is not None, "no test rows"
    return out


class _ViewScaler:
    """One view's column transform, fitted on the context rows (see module docstring)."""

    def __init__(self, x: np.ndarray, power: bool, outlier_threshold: float) -> None:
        self.mean, self.scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        z = self._scale(x)
        self.power = PowerTransformer(method="yeo-johnson", standardize=True).fit(z) if power else None
        if self.power is not None:
            self.low, self.high = z.min(axis=0), z.max(axis=0)
            z = self.power.transform(z)
        ddof = 1 if len(z) > 1 else 0
        mean, std = z.mean(axis=0), np.maximum(z.std(axis=0, ddof=ddof), 1e-6)
        kept = np.where(np.abs(z - mean) > outlier_threshold * std, np.nan, z)  # second estimate without outliers
        mean, std = np.nanmean(kept, axis=0), np.maximum(np.nanstd(kept, axis=0, ddof=ddof), 1e-6)
        self.lower, self.upper = mean - outlier_threshold * std, mean + outlier_threshold * std

    def _scale(self, x: np.ndarray) -> np.ndarray:
        return np.clip((x - self.mean) / self.scale, -100, 100)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        z = self._scale(x)
        if self.power is not None:
            try:
                z = self.power.transform(z)
            except ValueError:  # values the fitted transform overflows on: clip to the fitted range first
                z = self.power.transform(np.clip(z, self.low, self.high))
        z = np.maximum(-np.log1p(np.abs(z)) + self.lower, z)  # soft clip
        return np.minimum(np.log1p(np.abs(z)) + self.upper, z)


class OrionMSPEnsemble:
    """Class probabilities of test rows from `n_estimators` views of the context (see module docstring).

    `logits` is the model (orion_msp.OrionMSP in eval mode); classes are 0..n_classes-1 in `y_context`.
    # NOTE[DIFF] (docs/deviations.md D24): column permutations are seeded random permutations, not the
    # released wrapper's Latin squares; the views are drawn with `numpy.random.default_rng(seed)`.
    """

    def __init__(
        self, logits: Logits, *, n_estimators: int, seed: int, chunk_size: int, softmax_temperature: float = 0.9,
        norm_methods: tuple[str, ...] = ("none", "power"), outlier_threshold: float = 4.0,
    ) -> None:
        if n_estimators < 1:
            raise ValueError(f"{n_estimators=} must be >= 1")
        unknown = sorted(set(norm_methods) - {"none", "power"})
        if unknown:
            raise ValueError(f"norm_methods {unknown} unknown; use 'none' and/or 'power'")
        self.logits, self.n_estimators, self.seed, self.chunk_size = logits, n_estimators, seed, chunk_size
        self.softmax_temperature, self.norm_methods = softmax_temperature, norm_methods
        self.outlier_threshold = outlier_threshold

    def predict_proba(self, x_context: np.ndarray, y_context: np.ndarray, x_test: np.ndarray) -> np.ndarray:
        x_context, x_test = np.asarray(x_context, np.float64), np.asarray(x_test, np.float64)
        y_context = np.asarray(y_context, np.int64)
        n_classes = int(y_context.max()) + 1
        if set(np.unique(y_context)) != set(range(n_classes)):
            raise ValueError(f"context labels must cover 0..{n_classes - 1}; got {sorted(set(y_context.tolist()))}")
        keep = np.array([len(np.unique(c)) > 1 for c in x_context.T], dtype=bool)  # constant columns say nothing
        if not keep.any():
            keep[:] = True
        x_context, x_test = x_context[:, keep], x_test[:, keep]
        rng = np.random.default_rng(self.seed)
        shifts = rng.permutation(n_classes) if self.n_estimators > 1 else np.zeros(1, dtype=np.int64)
        permutations = [np.arange(x_context.shape[1])] + [rng.permutation(x_context.shape[1])
                                                          for _ in range(self.n_estimators - 1)]
        views = list(itertools.product(permutations, shifts))
        order = rng.permutation(len(views))
        # every view under each normalisation in turn, the first n_estimators of those (as the released wrapper)
        members = list(itertools.islice(((views[i], m) for i in order for m in self.norm_methods), self.n_estimators))
        scalers: dict[str, _ViewScaler] = {}
        total = np.zeros((len(x_test), n_classes))
        for (columns, shift), method in members:
            if method not in scalers:
                scalers[method] = _ViewScaler(x_context, method == "power", self.outlier_threshold)
            scale = scalers[method]
            logits = predict_in_chunks(
                self.logits, scale(x_context)[:, columns], (y_context + shift) % n_classes,
                scale(x_test)[:, columns], chunk_size=self.chunk_size, seed=self.seed,
            )
            total += np.roll(logits, -int(shift), axis=1)  # back to the original class order
        mean = total / len(members) / self.softmax_temperature
        proba = np.exp(mean - mean.max(axis=1, keepdims=True))
        return proba / proba.sum(axis=1, keepdims=True)

    def describe(self) -> dict[str, Any]:
        return {"n_estimators": self.n_estimators, "seed": self.seed, "chunk_size": self.chunk_size,
                "softmax_temperature": self.softmax_temperature, "norm_methods": list(self.norm_methods),
                "outlier_threshold": self.outlier_threshold, "column_permutations": "seeded random"}
