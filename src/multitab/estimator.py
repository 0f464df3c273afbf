"""The models as a scikit-learn estimator: a multitask table in, every task predicted at once.

    >>> import pandas as pd
    >>> from multitab import MultiTaskEstimator
    >>> table = pd.DataFrame({"age": range(40), "job": ["a", "b"] * 20, "click": [0, 1, 1, 0] * 10,
    ...                       "spend": [x / 3 for x in range(40)]})
    >>> est = MultiTaskEstimator("mmoe", max_epochs=2).fit(table[["age", "job"]], table[["click", "spend"]])
    >>> list(est.predict(table[["age", "job"]]).columns), est.task_types_
    (['click', 'spend'], {'click': 'binary', 'spend': 'regression'})

One estimator, not a classifier / regressor pair: a multitask table mixes binary, multiclass and regression
tasks that one model learns together (the point of multitask learning), so the tasks' types live per task
(`task_types_`, inferred from the targets by multitab.datasets.infer.task_type unless given) and each method answers per
task: `predict` gives labels (classification) or values (regression), `predict_proba` a frame of class
probabilities per classification task, `score` the mean over tasks of the pipeline's metric (AUC, explained
variance), `task_scores` each one.

What trains is the pipeline's own path: the features' kinds by multitab.datasets.infer, the preprocessing of the data
stages (multitab.datasets.preprocess: quantile transform and ordinal codes fit on the training rows), the model
of the registry (`model`: a name of multitab.registry.REGISTRY) with a hyperparameter file's keywords (`hparams`: a
file's path, or None for the model's recipe, hparams/recipe/<model>.yaml, resolved from the table's width) under
`protocol`'s overlay, and the training loop of the runs (multitab.training.loop.train: early stopping on the
validation rows, `validation_fraction` of the rows drawn with `random_state` unless `fit` is given
`validation_data`; the best epoch's weights kept). XGBoost trains as its runs do (multitab.training.run.fit_predict).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from multitab.datasets.infer import infer_features
from multitab.input_table import (
    as_frame,
    as_numbers,
    check_finite,
    check_same_rows,
    check_uniform,
    encode_targets,
    task_types_and_classes,
    validation_rows,
    warn_unseen,
)
from multitab.protocol import PROTOCOLS

_INFO = {"source": "local", "standin": False}


class MultiTaskEstimator(BaseEstimator):  # type: ignore[misc]
    """A registered model trained on a multitask table (module docstring).

    Parameters: `model` (a registry name: multitab_net, mmoe, ple, stem, stl_mlp, mtl_shared_bottom,
    tab_transformer, ft_transformer, saint, maya, xgboost; or your own class, `package.module:Class`: its
    hyperparameters multitab.hparams.keywords.own_class_hparams); `hparams` (a hyperparameter file's path; None:
    the recipe); `model_params` (constructor keywords laid over them); `protocol` (the overlay of
    hparams/protocol/<protocol>.yaml); `max_epochs`, `lr`, `batch_size` (None: the file's / recipe's);
    `patience` (epochs without improvement on the validation rows); `validation_fraction`, `random_state`
    (the validation rows and the training seed); `task_types` ({task: binary | multiclass | regression}, None:
    inferred); `device` (auto | cpu | cuda); `verbose` (a progress bar per epoch). Each is checked against
    `_parameter_constraints` when `fit` starts (docs/estimators.md, "What is checked, and when").

    Attributes after `fit`: `classes_` ({classification task: its labels, sorted}), `task_types_`,
    `feature_kinds_` (multitab.datasets.infer.FeatureKinds), `n_features_in_`, `feature_names_in_` (a DataFrame's),
    `hparams_` (the resolved hyperparameters, as a run's metrics.json records them), `model_` (the torch module,
    or the XGBoost model), `history_` (one row per epoch), `best_epoch_`.
    """

    # What each argument may be, checked when `fit` starts (scikit-learn's parameter validation): a value out of
    # range is refused naming the argument and its range, before anything trains.
    _parameter_constraints: dict[str, list[Any]] = {
        "model": [str],  # a registered model, or `package.module:Class` (checked when the hyperparameters resolve)
        "hparams": [str, os.PathLike, None],
        "model_params": [Mapping, None],
        "protocol": [StrOptions(set(PROTOCOLS))],
        "max_epochs": [Interval(Integral, 1, None, closed="left"), None],
        "lr": [Interval(Real, 0, None, closed="neither"), None],
        "batch_size": [Interval(Integral, 2, None, closed="left"), None],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "random_state": [Interval(Integral, 0, 2**32 - 1, closed="both")],
        "task_types": [Mapping, None],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "verbose": ["boolean"],
    }

    def __init__(self, model: str = "multitab_net", *, hparams: str | Path | None = None,
                 model_params: Mapping[str, Any] | None = None, protocol: str = "paper", max_epochs: int | None = None,
                 lr: float | None = None, batch_size: int | None = None, patience: int = 5,
                 validation_fraction: float = 0.1, random_state: int = 0,
                 task_types: Mapping[str, str] | None = None, device: str = "auto", verbose: bool = False) -> None:
        self.model = model
        self.hparams = hparams
        self.model_params = model_params
        self.protocol = protocol
        self.max_epochs = max_epochs
        self.lr = lr
        self.batch_size = batch_size
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.task_types = task_types
        self.device = device
        self.verbose = verbose

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        tags.input_tags.string = True
        tags.input_tags.categorical = True
        tags.non_deterministic = False
        return tags

    # ---- fitting -------------------------------------------------------------------------------------------
    def _resolve_hparams(self, n_features: int) -> tuple[Any, int]:
        """The hyperparameters (the file or the recipe, the protocol's overlay, `model_params`, `lr`,
        `max_epochs`) and the batch size."""
        from multitab.hparams import Hparams, apply_protocol, protocol_overlay, read, tuples
        from multitab.hparams.keywords import own_class_hparams, problems
        from multitab.hparams.recipe import project_root, recipe
        from multitab.registry import REGISTRY

        own = ":" in self.model  # a class of the user's own package, `package.module:Class`
        if self.model not in REGISTRY and not own:
            raise ValueError(f"model={self.model!r} is not a registered model; the registry: {list(REGISTRY)} (or a "
                             "class of your own, as `package.module:Class`)")
        root = project_root()
        batch_size: int | None = None
        if self.hparams is None and own:
            h = own_class_hparams(self.model)
        elif self.hparams is None:
            h, batch_size = recipe(self.model, n_features, root=root)
        else:
            h = read(Path(self.hparams))
        h = apply_protocol(h, self.model, protocol_overlay(root, self.protocol))
        values = {**h.model, **{k: tuples(v) for k, v in (self.model_params or {}).items()}}
        wrong = problems(self.model, values)
        if wrong:
            key, why = wrong[0]
            where = f"model_params[{key!r}]" if key in (self.model_params or {}) else f"{h.file}: model.{key}"
            raise ValueError(f"{where}: {why}")
        given = {"lr": self.lr, "max_epochs": self.max_epochs}  # None: the file's
        optim = None if h.optim is None else {**h.optim, **{k: v for k, v in given.items() if v is not None}}
        # a hyperparameter file holds no batch size: the paper's 2048 (params.yaml's train.batch_size) then
        return Hparams(values, optim, h.file, None), self.batch_size or batch_size or 2048

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any, *, validation_data: tuple[Any, Any] | None = None) -> MultiTaskEstimator:
        """Train on features `X` and task columns `y` (a DataFrame, or an array: one task per column); early
        stopping on `validation_data` (X_val, Y_val) when given, else on `validation_fraction` of the rows."""
        from multitab.config.data import PreprocessConfig
        from multitab.datasets.preprocess import preprocess
        from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task

        frame, targets = as_frame(X, "x"), as_frame(y, "y")
        validate_data(self, X, skip_check_array=True, reset=True)
        if len(frame) != len(targets):
            raise ValueError(f"X has {len(frame)} rows and y {len(targets)}: inconsistent numbers of samples")
        check_same_rows(X, y, "fit")
        if len(frame) < 2:
            raise ValueError(f"training needs at least 2 samples: n_samples = {len(frame)}")
        if frame.shape[1] == 0:
            raise ValueError(f"0 feature(s) (shape={frame.shape}) while a minimum of 1 is required.")
        clash = sorted(set(frame.columns) & set(targets.columns))
        if clash:
            raise ValueError(f"columns {clash} are both a feature (X) and a task (y); rename or drop them")
        check_uniform(frame, "X")
        check_uniform(targets, "y")
        self.task_types_, self.classes_ = task_types_and_classes(targets, self.task_types)
        check_finite(frame)
        self.feature_kinds_ = infer_features(frame)
        labels = encode_targets(targets, self.task_types_, self.classes_, "y")
        if validation_data is None:
            first = next((t for t, kind in self.task_types_.items() if kind != "regression"), None)
            rows = validation_rows(None if first is None else labels[first].to_numpy(), len(labels),
                                   self.validation_fraction, self.random_state)
            parts = {k: pd.concat([frame.iloc[r].reset_index(drop=True), labels.iloc[r].reset_index(drop=True)], axis=1)
                     for k, r in rows.items()}
        else:
            x_val, y_val = as_frame(validation_data[0], "x"), as_frame(validation_data[1], "y")
            lacking = [c for c in frame.columns if c not in x_val.columns]
            if lacking:
                raise ValueError(f"validation_data: feature column(s) {lacking} missing (X has {list(frame.columns)})")
            check_same_rows(*validation_data, "validation_data")
            check_uniform(y_val, "validation_data y")
            x_val = as_numbers(x_val, list(self.feature_kinds_.numerical))
            check_finite(x_val)
            parts = {"train": pd.concat([frame.reset_index(drop=True), labels.reset_index(drop=True)], axis=1),
                     "val": pd.concat([x_val.reset_index(drop=True),
                                       encode_targets(y_val, self.task_types_, self.classes_, "validation_data")
                                       .reset_index(drop=True)], axis=1)}
        kinds = {**{c: "categorical" for c in self.feature_kinds_.categorical},
                 **{c: "numerical" for c in self.feature_kinds_.numerical}}
        features = tuple(Feature(c, kinds[c]) for c in frame.columns)  # type: ignore[arg-type]
        tasks = tuple(Task(t, kind, column=t, n_classes=len(self.classes_[t]) if kind == "multiclass" else None)  # type: ignore[arg-type]
                      for t, kind in self.task_types_.items())
        raw = tuple(RawColumn(f.name, "float" if f.kind == "numerical" else "int", "feature") for f in features)
        schema = DatasetSchema(name="table", raw_columns=raw, features=features, tasks=tasks)
        # `test` is the validation rows again: the loop tests its best epoch, which the estimator does not need
        processed = preprocess(schema, {**parts, "test": parts["val"]}, PreprocessConfig(), _INFO)
        assert processed.coder is not None  # preprocess returns the transforms it fit
        self.meta_, self.coder_ = processed.meta, processed.coder
        self._train(processed.frames)
        return self

    def _train(self, frames: Mapping[str, pd.DataFrame]) -> None:
        import torch

        from multitab.datasets.schema import schema_from_meta
        from multitab.models import RUN_KEYWORDS, build_model, model_class
        from multitab.training.data import ProcessedData, split_from_frame_arrays
        from multitab.training.device import resolve_device, seed_everything
        from multitab.training.loop import train
        from multitab.training.run import fit_predict
        from multitab.training.settings import RunSettings

        schema = schema_from_meta(self.meta_)
        self.schema_ = schema
        h, batch_size = self._resolve_hparams(len(schema.features))
        self.hparams_, self.batch_size_ = h.record(), batch_size
        splits = {k: split_from_frame_arrays(schema, {c: v.to_numpy() for c, v in f.items()}, f"{k} rows")
                  for k, f in frames.items()}
        with tempfile.TemporaryDirectory(prefix="multitab-estimator-") as tmp:
            data = ProcessedData(meta=self.meta_, schema=schema, splits=splits, path=Path(tmp))
            seed_everything(self.random_state, True)
            kwargs = dict(h.model)
            if not issubclass(model_class(self.model), torch.nn.Module):
                kwargs |= dict(zip(RUN_KEYWORDS, (self.random_state, self.patience, self.device, 0)))
            model = build_model(self.model, schema, kwargs)
            if not isinstance(model, torch.nn.Module):
                result = fit_predict(model, data)
                self.model_, self.history_, self.best_epoch_ = model, result.history, result.best_epoch
                return
            optim = h.optim or {}
            settings = RunSettings(
                seed=self.random_state, max_epochs=int(optim["max_epochs"]), patience=self.patience,
                batch_size=batch_size, optimizer=optim["optimizer"], lr=optim["lr"],
                weight_decay=optim["weight_decay"], device=self.device,  # type: ignore[arg-type]
                precision="fp32", compile=False, deterministic=True, progress=self.verbose, on_step=None,
                early_stopping_smoothing=None)
            result = train(model, data, settings, checkpoint_dir=Path(tmp) / "checkpoints",
                           run_fingerprint="estimator", run_settings=None)
        self.model_, self.history_, self.best_epoch_ = model.eval(), result.history, result.best_epoch
        self.device_ = resolve_device(self.device)
        # a model that reads the training rows at prediction (MAYA's retrieval) keeps them
        self._context = data.splits["train"] if callable(getattr(model, "fit_context", None)) else None

    # ---- predicting ----------------------------------------------------------------------------------------
    def _scores(self, X: Any) -> dict[str, np.ndarray]:
        """The model's outputs per task (logits, class logits, values in target units) for the rows of `X`."""
        import torch

        from multitab.training.data import TensorSplit
        from multitab.training.evaluate import predict

        check_is_fitted(self, "model_")
        frame = as_frame(X, "x")
        validate_data(self, X, skip_check_array=True, reset=False)
        if not isinstance(X, pd.DataFrame):
            frame = frame.set_axis([f["name"] for f in self.meta_["features"]], axis=1)
        # each column as the kind it had at fit: numbers as numbers, categories compared by value
        frame = as_numbers(frame, self.coder_.numerical)
        check_finite(frame)
        x_num, x_cat = self.coder_.encode(frame)
        warn_unseen(x_cat, self.coder_.categorical)
        if not isinstance(self.model_, torch.nn.Module):
            return {k: np.asarray(v) for k, v in self.model_.predict(x_num, x_cat).items()}
        n = len(frame)
        split = TensorSplit(torch.from_numpy(x_num), torch.from_numpy(x_cat), torch.zeros((n, 0)),
                            torch.zeros((n, 0), dtype=torch.int64), (), ())
        fit_context = getattr(self.model_, "fit_context", None)
        if self._context is not None and callable(fit_context):
            with torch.inference_mode():
                fit_context(self._context.x_num, self._context.x_cat, self._context.targets())
        return predict(self.model_, split, self.schema_.tasks, batch_size=self.batch_size_, device=self.device_)

    def predict(self, X: Any) -> pd.DataFrame:
        """One column per task: a classification task's label (one of `classes_[task]`), a regression task's value."""
        scores = self._scores(X)
        out = {}
        for t, kind in self.task_types_.items():
            s = scores[t]
            if kind == "binary":
                out[t] = self.classes_[t][(s > 0).astype(np.int64)]
            elif kind == "multiclass":
                out[t] = self.classes_[t][s.argmax(axis=1)]
            else:
                stats = self.meta_["target_stats"][t]
                out[t] = s.astype(np.float64) * stats["std"] + stats["mean"]
        return pd.DataFrame(out, index=X.index if isinstance(X, pd.DataFrame) else None)

    def predict_proba(self, X: Any) -> dict[str, pd.DataFrame]:
        """{classification task: a frame of class probabilities, one column per label of `classes_[task]`}."""
        scores = self._scores(X)
        index = X.index if isinstance(X, pd.DataFrame) else None
        out = {}
        for t, classes in self.classes_.items():
            s = scores[t].astype(np.float64)
            if self.task_types_[t] == "binary":
                p = 1.0 / (1.0 + np.exp(-s))
                probs = np.stack([1.0 - p, p], axis=1)
            else:
                e = np.exp(s - s.max(axis=1, keepdims=True))
                probs = e / e.sum(axis=1, keepdims=True)
            out[t] = pd.DataFrame(probs, columns=list(classes), index=index)
        return out

    def task_scores(self, X: Any, y: Any) -> dict[str, float]:
        """{task: the pipeline's metric on these rows}: AUC (binary; multiclass one-vs-rest) or explained variance."""
        from multitab.metrics import task_metrics

        scores = self._scores(X)
        check_same_rows(X, y, "score")
        labels = encode_targets(as_frame(y, "y"), self.task_types_, self.classes_, "y")
        truth = {t: labels[t].to_numpy() for t in labels}
        for t, stats in self.meta_["target_stats"].items():  # scored as the processed splits hold them (float32)
            truth[t] = ((truth[t] - stats["mean"]) / stats["std"]).astype(np.float32)
        return task_metrics(self.schema_.tasks, truth, scores)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The mean over tasks of `task_scores` (the paper's mean metric; NaN when no task's is defined)."""
        from multitab.metrics import mean_metric

        if sample_weight is not None:
            raise ValueError("sample_weight is not supported (the training loop weighs every row alike)")
        value = mean_metric(self.task_scores(X, y))
        return value if math.isfinite(value) else float("nan")
