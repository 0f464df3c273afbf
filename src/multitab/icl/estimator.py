"""Orion-MSP as a scikit-learn classifier, on the `icl` stage's code (multitab.icl.run): the checkpoint read
and verified as the stage reads it, the context sampled by `context.context_rows`, the ensemble of views
and the encoding reuse of `context.OrionMSPEnsemble`.

    clf = OrionMSPClassifier().fit(X_train, y_train)        # the checkpoint icl.lock names
    clf = OrionMSPClassifier(checkpoint="Orion-MSP-v1.0.ckpt", sha256="...").fit(X, y)
    clf.predict_proba(X_test); clf.predict(X_test); clf.classes_

`fit` stores the context (no training: a pretrained model) and encodes it lazily; labels of any kind are
encoded as 0..k-1 (`classes_`, sorted); columns that are not numbers (pandas object, category or bool
columns) are coded as integers in the order of their sorted training values, a value not seen in training
as -1. A class that the sampled context happens to miss gets probability 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from multitab.icl import checkpoint as ckpt
from multitab.icl import context, lock
from multitab.icl.orion_msp import OrionMSP, from_checkpoint


def load_orion(path: str | Path, sha256: str | None, *, window: Literal["reference", "paper"] = "reference",
               memory: Literal["reference", "split"] = "reference", links: Literal["reference", "seeded"] = "seeded",
               link_seed: int = 0, device: str | torch.device = "cpu") -> tuple[OrionMSP, str]:
    """The Orion-MSP of a released checkpoint file (checked against `sha256` when given; read as tensors and
    plain data only), in eval mode on `device`, and the file's sha256."""
    loaded, found = ckpt.load(path, sha256)
    try:
        net = from_checkpoint(loaded, window=window, memory=memory, links=links, link_seed=link_seed)
    except (ValueError, RuntimeError) as e:  # its config or weights are not Orion-MSP's
        raise ckpt.CheckpointError(f"checkpoint {path}: {' '.join(str(e).split())[:300]}") from e
    return net.to(device), found


def _locked_orion(lock_path: str | Path) -> tuple[Path, str]:
    entries = lock.read(lock_path)
    if "orion_msp" not in entries:
        raise ckpt.CheckpointError(f"{lock_path} has no orion_msp checkpoint: run `make icl-weights`, or give "
                                   "`checkpoint=` a file")
    entry = entries["orion_msp"]
    path = Path(entry.path)
    return (path if path.is_absolute() else Path(lock_path).absolute().parent / path), entry.sha256


class _CategoryCodes:
    """Integer codes for the columns of a pandas frame that are not numbers (fitted on training rows)."""

    def __init__(self, X: Any) -> None:
        columns = getattr(X, "columns", None)
        dtypes = getattr(X, "dtypes", None)
        self.columns = [] if columns is None or dtypes is None else [
            c for c, t in zip(columns, dtypes) if str(t) in ("object", "category", "bool", "string", "str")]
        self.values = {c: np.array(sorted(X[c].astype(str).unique())) for c in self.columns}

    def __call__(self, X: Any) -> Any:
        if not self.columns:
            return X
        X = X.copy()
        for c in self.columns:
            values = X[c].astype(str).to_numpy()
            codes = np.searchsorted(self.values[c], values)
            known = self.values[c]
            seen = (codes < len(known)) & (known[np.minimum(codes, len(known) - 1)] == values)
            X[c] = np.where(seen, codes, -1).astype(np.float64)
        return X


class OrionMSPClassifier(ClassifierMixin, BaseEstimator):
    """Orion-MSP (pretrained, in-context) for binary and multiclass targets; see the module docstring.

    Parameters are those of params.yaml `icl` for one model: `checkpoint` (a file; None: the one `lock`
    names) and its `sha256` pin, `context_size` (None: every training row), `n_estimators`, `chunk_size`, the
    switches `window`, `memory`, `links`, `link_seed` (docs/deviations.md D20-D22), `device`, `random_state`
    (the context sample, the views, the chunks). The defaults are the released wrapper's (every training row,
    32 views: a GPU's work); params.yaml's CPU profile is `context_size=1024, n_estimators=1`.
    """

    def __init__(self, checkpoint: str | Path | None = None, sha256: str | None = None, lock: str | Path = "icl.lock",
                 context_size: int | None = None, n_estimators: int = 32, chunk_size: int = 512,
                 window: Literal["reference", "paper"] = "reference",
                 memory: Literal["reference", "split"] = "reference",
                 links: Literal["reference", "seeded"] = "seeded", link_seed: int = 0, device: str = "cpu",
                 random_state: int = 0) -> None:
        self.checkpoint = checkpoint
        self.sha256 = sha256
        self.lock = lock
        self.context_size = context_size
        self.n_estimators = n_estimators
        self.chunk_size = chunk_size
        self.window = window
        self.memory = memory
        self.links = links
        self.link_seed = link_seed
        self.device = device
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> OrionMSPClassifier:
        self.category_codes_ = _CategoryCodes(X)
        X, y = validate_data(self, self.category_codes_(X), y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y has {len(self.classes_)} class; a classifier needs at least 2")
        path, pin = ((Path(self.checkpoint), self.sha256) if self.checkpoint is not None
                     else _locked_orion(self.lock))
        self.model_, self.checkpoint_sha256_ = load_orion(
            path, pin, window=self.window, memory=self.memory, links=self.links, link_seed=self.link_seed,
            device=self.device)
        rows = context.context_rows(len(X), self.context_size, self.random_state)
        self.present_, self.context_labels_ = np.unique(codes[rows], return_inverse=True)
        self.ensemble_ = context.OrionMSPEnsemble(self.model_, n_estimators=self.n_estimators,
                                                  seed=self.random_state, chunk_size=self.chunk_size).fit(X[rows])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, self.category_codes_(X), dtype=np.float64, reset=False)
        proba = np.zeros((len(X), len(self.classes_)))
        if len(self.present_) == 1:  # one class in the context: it is certain
            proba[:, self.present_[0]] = 1.0
            return proba
        proba[:, self.present_] = self.ensemble_.predict_proba(self.context_labels_, {"X": X}, keep=False)["X"]
        return proba

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
