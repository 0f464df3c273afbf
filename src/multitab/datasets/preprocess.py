"""Canonical splits -> model-ready splits, fit on train only.

- Categorical columns: ordinal codes from an encoder fit on the training split; index 0 is reserved for values
  never seen in train, known values get 1..K, so a column's cardinality is K + 1. (The authors' AliExpress
  code fits a second encoder on the test set, which scrambles test codes; see docs/deviations.md.)
- Numerical columns: the FT-Transformer recipe (Gorishniy et al. 2021, Sec. 4 and appendix): Gaussian noise of
  relative scale `noise` added once to the training features, then scikit-learn's QuantileTransformer with a
  normal output, n_quantiles = max(min(n_train // 30, max_quantiles), 10), fit on train; or a standard scaler,
  or nothing (`numerical` in params).
- Regression targets: raw (`targets: raw`, the default: the authors' notebook; the paper is silent) or
  standardised with the training mean and standard deviation (`targets: standard`). meta.json's
  target_stats hold the map back to original units (mean 0, std 1 for raw targets) and
  target_transform says which (docs/deviations.md, "Regression targets").
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.preprocessing import OrdinalEncoder, QuantileTransformer, StandardScaler

from multitab.config.data import PreprocessConfig
from multitab.datasets.schema import DatasetSchema

log = logging.getLogger(__name__)


@dataclass
class Processed:
    frames: dict[str, pd.DataFrame]
    meta: dict[str, Any]
    coder: FeatureCoder | None = None  # the fitted feature transforms (for rows of a later frame)


@dataclass
class FeatureCoder:
    """The feature transforms fit on a training split (`fit_features`), for rows of any later frame: the
    numerical transform (None: `numerical: none`) and the categorical codes (None: no categorical feature)."""

    numerical: list[str]
    categorical: list[str]
    scaler: QuantileTransformer | StandardScaler | None
    encoder: OrdinalEncoder | None
    cardinalities: dict[str, int]

    def encode(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(x_num float32 (n, n_num), x_cat int64 (n, n_cat)) of `frame`'s feature columns; a category unseen
        in train is code 0."""
        x = frame[self.numerical].to_numpy(dtype=np.float32)
        x_num = x if self.scaler is None else self.scaler.transform(x).astype(np.float32, copy=False)
        return x_num, self.codes(frame)

    def codes(self, frame: pd.DataFrame) -> np.ndarray:
        """The categorical codes (n, n_cat) of `frame`: 1..K for the training values, 0 for one unseen there.
        Values are matched by value, not by type (`match_categories`): a column of codes 1, 2, 3 at fit and
        "1", "2", "3" (read from a CSV as text) or 1.0, 2.0, 3.0 here gets the same codes."""
        if self.encoder is None:
            return np.zeros((len(frame), 0), dtype=np.int64)
        pairs = zip(self.categorical, self.encoder.categories_)
        return np.stack([match_categories(categories, frame[name]) for name, categories in pairs], axis=1)


def _number_key(value: Any) -> str | None:
    """A number's value as text (`1`, `1`, `2.5` for 1, 1.0, "2.50"); None for what is no number."""
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        return None if math.isnan(v) else str(int(v)) if v.is_integer() else repr(v)
    if isinstance(value, str):
        for parse in (int, float):
            try:
                return _number_key(parse(value.strip()))
            except ValueError:
                pass
    return None


def _value_key(value: Any, kind: str) -> str | None:
    """What a value is compared by against training categories of `kind` (number, bool or text)."""
    if kind == "number":
        return _number_key(value)
    if kind == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().capitalize()
        number = _number_key(value)
        return {"1": "True", "0": "False"}.get(number) if number is not None else None
    if isinstance(value, str):
        return value
    return _number_key(value) if isinstance(value, numbers.Number | np.bool_) else str(value)


def match_categories(categories: np.ndarray, values: pd.Series | np.ndarray) -> np.ndarray:
    """The codes of `values` against sorted training `categories`: 1..K (the category's rank), 0 for a value
    equal to none. Compared by value: numbers as numbers whatever their type or text form ("3", 3, 3.0), the
    booleans as True / False (also 1 / 0, "true"), text as text (a number given for a text category as its
    digits, 3 for "3"). Categories of mixed types, or two that one comparison would make equal, are matched
    exactly."""
    if all(isinstance(c, bool | np.bool_) for c in categories):
        kind = "bool"
    elif all(isinstance(c, numbers.Number) for c in categories):
        kind = "number"
    else:
        kind = "text" if all(isinstance(c, str) for c in categories) else "exact"
    index: dict[Any, int] = {}
    for rank, c in enumerate(categories, 1):
        index.setdefault(c if kind == "exact" else _value_key(c, kind), rank)
    if len(index) < len(categories):
        kind, index = "exact", {c: rank for rank, c in enumerate(categories, 1)}
    codes, uniques = pd.factorize(values if isinstance(values, pd.Series) else np.asarray(values, dtype=object))
    found = [index.get(u if kind == "exact" else _value_key(u, kind), 0) for u in uniques]
    return np.asarray([*found, 0], dtype=np.int64)[codes]  # a missing value (code -1): unseen


def n_quantiles(n_train: int, cfg: PreprocessConfig) -> int:
    """The quantile transform's number of quantiles for `n_train` training rows (FT-Transformer's recipe)."""
    return max(min(n_train // 30, cfg.max_quantiles), 10)


def fit_features(cfg: PreprocessConfig, train: pd.DataFrame, numerical: list[str], categorical: list[str]
                 ) -> tuple[FeatureCoder, tuple[np.ndarray, np.ndarray]]:
    """The transforms fit on `train` and `train` transformed (its numerical features with the fitting noise)."""
    x = train[numerical].to_numpy(dtype=np.float32, copy=True)
    scaler: QuantileTransformer | StandardScaler | None = None
    if cfg.numerical == "standard" and numerical:
        scaler = StandardScaler().fit(x)
        x = scaler.transform(x).astype(np.float32)
    elif cfg.numerical == "quantile" and numerical:
        rng = np.random.default_rng(cfg.seed)
        if cfg.noise > 0:
            # Noise once, before fitting, so features with few distinct values get a smooth quantile map.
            stds = x.std(axis=0)
            scale = (cfg.noise / np.maximum(stds, cfg.noise)).astype(np.float32)
            x += scale * rng.standard_normal(x.shape, dtype=np.float32)
        scaler = QuantileTransformer(n_quantiles=n_quantiles(len(x), cfg), output_distribution="normal",
                                     subsample=cfg.subsample,
                                     random_state=cfg.seed, copy=False)
        scaler.fit(x)
        x = scaler.transform(x).astype(np.float32, copy=False)
    encoder, cardinalities = None, {}
    if categorical:
        encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, dtype=np.float64)
        encoder.fit(train[categorical].to_numpy())
        cardinalities = {n: len(c) + 1 for n, c in zip(categorical, encoder.categories_)}
    coder = FeatureCoder(numerical, categorical, scaler, encoder, cardinalities)
    return coder, (x, coder.codes(train))


def preprocess(
    schema: DatasetSchema, frames: dict[str, pd.DataFrame], cfg: PreprocessConfig, info: dict[str, Any]
) -> Processed:
    """Fit every transform on `frames["train"]` and apply it to all three splits."""
    for split, df in frames.items():
        if len(df) == 0:
            raise ValueError(f"{schema.name}/{split}: split has zero rows; nothing to preprocess")
    num_names = [f.name for f in schema.features if f.kind == "numerical"]
    cat_names = [f.name for f in schema.features if f.kind == "categorical"]
    coder, train_x = fit_features(cfg, frames["train"], num_names, cat_names)
    encoded = {split: train_x if split == "train" else coder.encode(df) for split, df in frames.items()}
    num = {split: x[0] for split, x in encoded.items()}
    cats = {split: x[1] for split, x in encoded.items()}
    cardinalities = coder.cardinalities

    target_stats: dict[str, dict[str, float]] = {}
    for t in schema.tasks:
        if t.type == "regression":
            y = frames["train"][t.name].to_numpy(dtype=np.float64)
            if cfg.targets == "standard":
                target_stats[t.name] = {"mean": float(y.mean()), "std": float(y.std() or 1.0)}
            else:
                target_stats[t.name] = {"mean": 0.0, "std": 1.0}

    out: dict[str, pd.DataFrame] = {}
    for split, df in frames.items():
        cols: dict[str, np.ndarray] = {}
        ni = ci = 0
        for f in schema.features:
            if f.kind == "numerical":
                cols[f.name] = num[split][:, ni]
                ni += 1
            else:
                cols[f.name] = cats[split][:, ci]
                ci += 1
        for t in schema.tasks:
            y = df[t.name].to_numpy()
            if t.type == "regression":
                s = target_stats[t.name]
                cols[t.name] = ((y.astype(np.float64) - s["mean"]) / s["std"]).astype(np.float32)
            else:
                cols[t.name] = y.astype(np.int64, copy=False)
        out[split] = pd.DataFrame(cols)

    meta = processed_meta(schema, cfg, info, cardinalities, target_stats, {k: len(v) for k, v in out.items()})
    return Processed(out, meta, coder)


def processed_meta(
    schema: DatasetSchema,
    cfg: PreprocessConfig,
    info: dict[str, Any],
    cardinalities: dict[str, int],
    target_stats: dict[str, dict[str, float]],
    n_rows: dict[str, int],
) -> dict[str, Any]:
    """meta.json of a processed dataset (without `inputs` and `validation`, which the step adds)."""
    return {
        "dataset": schema.name,
        "features": [
            {
                "name": f.name,
                "kind": f.kind,
                "cardinality": cardinalities[f.name] if f.kind == "categorical" else None,
            }
            for f in schema.features
        ],
        "tasks": [
            {
                "name": t.name,
                "type": t.type,
                "n_classes": (t.n_classes if t.type == "multiclass" else (2 if t.type == "binary" else None)),
            }
            for t in schema.tasks
        ],
        "source": info["source"],
        "standin": bool(info["standin"]),
        "n_rows": n_rows,
        "target_stats": target_stats,
        "numerical_transform": cfg.numerical,
        # what validate_processed judges the quantile-transformed training columns by (what the map can give)
        **({"n_quantiles": n_quantiles(n_rows["train"], cfg), "quantile_subsample": cfg.subsample}
           if cfg.numerical == "quantile" else {}),
        "target_transform": cfg.targets,
        "unknown_index": 0,
    }
