"""TabICL (Qu et al., ICML 2025; v2, 2026) through its own package, `tabicl` (pinned in pyproject, BSD-3):
`TabICLClassifier` for binary and multiclass tasks, `TabICLRegressor` for regression tasks, each loading a
local checkpoint file (checked against the sha256 pinned in params first) and never downloading. The file
is read by multitab.files.checkpoint, as every checkpoint is, not by the package's own loader: a file that
cannot be read, or is no TabICL checkpoint, is then one line naming it (bad input), not the package's
unpickling error or assertion.

The package's own preprocessing and ensemble are used as they are (`n_estimators` views, its default
normalisations, column and class shuffles), seeded with `seed`; the context is the rows `fit` is given
(context.context_rows picks them)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from multitab.files.checkpoint import CheckpointError, load_plain
from multitab.icl import checkpoint

# the package's checkpoint names (it refuses others); a local file of any name is loaded as the one named
CHECKPOINT_VERSIONS = {"classifier": "tabicl-classifier-v2-20260212.ckpt",
                       "regressor": "tabicl-regressor-v2-20260212.ckpt"}


def build(kind: str, *, path: str | Path, sha256: str | None, n_estimators: int, seed: int,
          device: str = "cpu") -> tuple[Any, str]:
    """An unfitted TabICL `kind` ("classifier" or "regressor") that loads `path`, and the file's sha256."""
    import tabicl

    if kind not in CHECKPOINT_VERSIONS:
        raise ValueError(f"{kind=} must be one of {sorted(CHECKPOINT_VERSIONS)}")
    found = checkpoint.verify(Path(path), sha256)
    cls = tabicl.TabICLClassifier if kind == "classifier" else tabicl.TabICLRegressor
    estimator = cls(model_path=Path(path), allow_auto_download=False, checkpoint_version=CHECKPOINT_VERSIONS[kind],
                    n_estimators=n_estimators, random_state=seed, device=device, use_amp=False, verbose=False)
    estimator._load_model = functools.partial(_load_model, estimator, Path(path))  # fit calls it
    return estimator, found


def _load_model(estimator: Any, path: Path) -> None:
    """The package's `_load_model` for a local file (tabicl 2.2.0: the classifier's and the regressor's set
    the same three attributes), with the file read by multitab.files.checkpoint."""
    from tabicl._model.tabicl import TabICL

    loaded = load_plain(path)
    config, state = (loaded.get("config"), loaded.get("state_dict")) if isinstance(loaded, dict) else (None, None)
    if not isinstance(config, dict) or not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} is no TabICL checkpoint (a dict with a 'config' dict and a "
                              "'state_dict' dict)")
    try:
        model = TabICL(**config)
        model.load_state_dict(state)
    except (TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"checkpoint {path} does not fit TabICL's model: {' '.join(str(e).split())[:300]}"
                              ) from e
    estimator.model_path_, estimator.model_, estimator.model_config_ = path, model.eval(), config


def predict(estimator: Any, x_context: np.ndarray, y_context: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Classifier: class probabilities (n_test, n_classes) in the order of the labels 0..n_classes-1 seen
    in `y_context`; regressor: predictions (n_test,)."""
    estimator.fit(np.asarray(x_context, np.float32), np.asarray(y_context))
    x_test = np.asarray(x_test, np.float32)
    if hasattr(estimator, "predict_proba"):
        return np.asarray(estimator.predict_proba(x_test), dtype=np.float64)
    return np.asarray(estimator.predict(x_test), dtype=np.float64)
