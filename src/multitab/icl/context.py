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
  averaged, and turned into probabilities with temperature 0.9. A view's context is encoded once and read
  by every chunk and every task (multitab.icl.orion_encoding); `reuse=False` recomputes it per chunk.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from sklearn.preprocessing import PowerTransformer

from multitab.icl import orion_encoding
from multitab.icl.orion_msp import OrionMSP

Logits = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (1, T, H), (1, n_train) -> (1, T_test, C)


def context_rows(n_train: int, max_rows: int | None, seed: int) -> np.ndarray:
    """Indices of the training rows used as context (see module docstring); `max_rows=None`: all of them."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"{max_rows=} must be >= 1 (or None: every training row)")
    if max_rows is None or n_train <= max_rows:
        return np.arange(n_train)
    # NOTE[DIFF] (docs/deviations.md D25): the released wrappers take every training row as the context
    return np.sort(np.random.default_rng(seed).choice(n_train, size=max_rows, replace=False))


def eval_rows(n_rows: int, max_rows: int | None, seed: int, split: str) -> np.ndarray:
    """Indices of the rows of `split` that are scored: all of them, or at most `max_rows` as a uniform sample
    without replacement seeded by the run's seed and the split's name, in file order."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"{max_rows=} must be >= 1 (or None: every row)")
    if max_rows is None or n_rows <= max_rows:
        return np.arange(n_rows)
    # NOTE[DIFF] (docs/deviations.md D27): the released wrappers score every row of a split
    stream = np.random.default_rng([seed, zlib.crc32(split.encode())])
    return np.sort(stream.choice(n_rows, size=max_rows, replace=False))


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

    `fit(x_context)` fixes what does not depend on labels (the columns kept, the views' column permutations,
    their scalers and encodings); `predict_proba(y_context, sets)` predicts named sets of test rows for one
    task, classes 0..n_classes-1 in `y_context`. With `keep` the label-independent encodings of each named
    set stay for later tasks (the stage predicts every task of a dataset on the same val and test rows).
    # NOTE[DIFF] (docs/deviations.md D24): column permutations are seeded random permutations, not the
    # released wrapper's Latin squares; the views are drawn with `numpy.random.default_rng(seed)`.
    """

    def __init__(
        self, model: OrionMSP, *, n_estimators: int, seed: int, chunk_size: int, softmax_temperature: float = 0.9,
        norm_methods: tuple[str, ...] = ("none", "power"), outlier_threshold: float = 4.0, reuse: bool = True,
    ) -> None:
        if n_estimators < 1:
            raise ValueError(f"{n_estimators=} must be >= 1")
        if chunk_size < 1:
            raise ValueError(f"{chunk_size=} must be >= 1")
        unknown = sorted(set(norm_methods) - {"none", "power"})
        if unknown:
            raise ValueError(f"norm_methods {unknown} unknown; use 'none' and/or 'power'")
        self.model, self.n_estimators, self.seed, self.chunk_size = model, n_estimators, seed, chunk_size
        self.softmax_temperature, self.norm_methods = softmax_temperature, norm_methods
        self.outlier_threshold, self.reuse = outlier_threshold, reuse

    def fit(self, x_context: np.ndarray) -> OrionMSPEnsemble:
        x_context = np.asarray(x_context, np.float64)
        keep = np.array([len(np.unique(c)) > 1 for c in x_context.T], dtype=bool)  # constant columns say nothing
        if not keep.any():
            keep[:] = True
        self._keep, self._x_context = keep, x_context[:, keep]
        self._scalers: dict[str, _ViewScaler] = {}
        self._encoded: dict[tuple[int, str], orion_encoding.EncodedContext] = {}
        self._rows: dict[tuple[int, str, str], torch.Tensor] = {}
        return self

    def _draw(self, n_classes: int) -> tuple[list[np.ndarray], list[tuple[int, int, str]]]:
        """The column permutations (drawn first: the same for every task) and the members, each a
        (permutation index, class shift, normalisation): every permutation x shift view under each
        normalisation in turn, in a seeded order, the first n_estimators (as the released wrapper)."""
        rng = np.random.default_rng(self.seed)
        n_columns = self._x_context.shape[1]
        permutations = [np.arange(n_columns)] + [rng.permutation(n_columns) for _ in range(self.n_estimators - 1)]
        shifts = rng.permutation(n_classes) if self.n_estimators > 1 else np.zeros(1, dtype=np.int64)
        views = list(itertools.product(range(len(permutations)), shifts))
        order = rng.permutation(len(views))
        members = ((views[i][0], int(views[i][1]), m) for i in order for m in self.norm_methods)
        return permutations, list(itertools.islice(members, self.n_estimators))

    def _scaler(self, method: str) -> _ViewScaler:
        if method not in self._scalers:
            self._scalers[method] = _ViewScaler(self._x_context, method == "power", self.outlier_threshold)
        return self._scalers[method]

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=next(self.model.parameters()).device)[None]

    def predict_proba(self, y_context: np.ndarray, sets: Mapping[str, np.ndarray], *,
                      keep: bool = True) -> dict[str, np.ndarray]:
        """Probabilities (n_rows, n_classes) of every named set of test rows."""
        y_context = np.asarray(y_context, np.int64)
        n_classes = int(y_context.max()) + 1
        if set(np.unique(y_context)) != set(range(n_classes)):
            raise ValueError(f"context labels must cover 0..{n_classes - 1}; got {sorted(set(y_context.tolist()))}")
        sets = {name: np.asarray(x, np.float64)[:, self._keep] for name, x in sets.items()}
        permutations, members = self._draw(n_classes)
        totals = {name: np.zeros((len(x), n_classes)) for name, x in sets.items()}
        with torch.no_grad():
            for index, shift, method in members:
                columns, scale = permutations[index], self._scaler(method)
                labels = (y_context + shift) % n_classes
                for name, x in sets.items():
                    if self.reuse:
                        logits = self._logits(index, method, columns, scale, labels, name, x, keep)
                    else:
                        logits = predict_in_chunks(self._recomputed, scale(self._x_context)[:, columns], labels,
                                                   scale(x)[:, columns], chunk_size=self.chunk_size, seed=self.seed)
                    totals[name] += np.roll(logits, -shift, axis=1)  # back to the original class order
                if (index, method) in self._encoded:
                    self._encoded[(index, method)].labelled.clear()  # a task's keys and values: this member's
        out = {}
        for name, total in totals.items():
            mean = total / len(members) / self.softmax_temperature
            proba = np.exp(mean - mean.max(axis=1, keepdims=True))
            out[name] = proba / proba.sum(axis=1, keepdims=True)
        return out

    def _recomputed(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The whole network on the context and a chunk together (the path without reuse)."""
        device = next(self.model.parameters()).device
        out: torch.Tensor = self.model(x.to(device), y.to(device))
        return out.cpu()

    def _logits(self, index: int, method: str, columns: np.ndarray, scale: _ViewScaler, labels: np.ndarray,
                name: str, x: np.ndarray, keep: bool) -> np.ndarray:
        """A member's logits of the set `name` from the view's encoded context and the set's encoded rows."""
        model = self.model
        if (index, method) not in self._encoded:
            self._encoded[(index, method)] = orion_encoding.encode_context(
                model, self._tensor(scale(self._x_context)[:, columns]))
        context = self._encoded[(index, method)]
        rows = self._rows.get((index, method, name))
        if rows is None:
            x_view = scale(x)[:, columns]
            chunks = (x_view[start : start + self.chunk_size] for start in range(0, len(x_view), self.chunk_size))
            rows = torch.cat([orion_encoding.encode_rows(model, context, self._tensor(chunk)) for chunk in chunks],
                             dim=1)
            if keep:
                self._rows[(index, method, name)] = rows
        y = torch.as_tensor(labels, device=rows.device)
        order = np.random.default_rng(self.seed).permutation(rows.shape[1])  # the chunks of predict_in_chunks
        out = np.empty((rows.shape[1], int(labels.max()) + 1), dtype=np.float32)
        for start in range(0, len(order), self.chunk_size):
            chunk = order[start : start + self.chunk_size]
            index_tensor = torch.as_tensor(chunk, device=rows.device)
            out[chunk] = orion_encoding.logits(model, context, y, rows[:, index_tensor])[0].float().cpu().numpy()
        return out

    def describe(self) -> dict[str, Any]:
        return {"n_estimators": self.n_estimators, "seed": self.seed, "chunk_size": self.chunk_size,
                "softmax_temperature": self.softmax_temperature, "norm_methods": list(self.norm_methods),
                "outlier_threshold": self.outlier_threshold, "column_permutations": "seeded random",
                "context_encoding": "reused" if self.reuse else "recomputed per chunk"}
