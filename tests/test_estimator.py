"""multitab.MultiTaskEstimator: scikit-learn's estimator checks, the same test metrics as the pipeline's training
path on the same data, seed and hyperparameters, pandas in and out, and the module's doctest."""

from __future__ import annotations

import doctest
import json
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import estimator_checks_generator

import multitab.estimator
from multitab import MultiTaskEstimator

TINY = {"model_params": {"d_embedding": 4, "d_hidden": [8]}, "max_epochs": 1, "batch_size": 32}
# The checks that do not apply, by name, and why. The methods answer per task in pandas (predict: a DataFrame with
# a column per task; predict_proba: {task: DataFrame of class probabilities}), which these checks index by row
# number or subtract as one numpy array; test_predictions_follow_the_rows and test_refit_and_pickle_give_the_same
# _predictions below check the same properties on the frames.
SKIPPED = {
    "check_estimators_pickle": "compares predict_proba's outputs as arrays (a dict of frames here)",
    "check_methods_sample_order_invariance": "indexes predict's DataFrame by row number",
    "check_methods_subset_invariance": "stacks predict_proba's outputs of single rows as one array",
    "check_fit_idempotent": "subtracts predict_proba's outputs as arrays",
    "check_array_api_input": "array-API namespaces (the models take numpy / pandas, trained in torch)",
}


def _checks() -> list[Any]:
    """(check name, check) of scikit-learn's checks of a tiny STL-MLP, named by the check (not by the estimator's
    repr, so that every pytest-xdist worker collects the same ids); a repeated name gets its rank."""
    params, seen = [], {}
    for _, check in estimator_checks_generator(MultiTaskEstimator("stl_mlp", **TINY), legacy=True, mark=None):
        name = getattr(check, "func", check).__name__
        seen[name] = seen.get(name, 0) + 1
        marks = [pytest.mark.skip(reason=SKIPPED[name])] if name in SKIPPED else []
        params.append(pytest.param(check, id=name if seen[name] == 1 else f"{name}-{seen[name]}", marks=marks))
    return params


@pytest.mark.parametrize("check", _checks())
def test_scikit_learn_check(check: Any, one_torch_thread: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(MultiTaskEstimator("stl_mlp", **TINY))


def _table(n: int = 240, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Features and tasks with the names a user's table has (spaces, capitals, punctuation)."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"Age (years)": rng.integers(17, 90, n),
                      "class of worker": rng.choice(["Private", "Gov", "Self"], n),
                      "wage/hour": rng.normal(20, 5, n)})
    signal = (X["wage/hour"] - 20) / 5 + (X["class of worker"] == "Gov")
    Y = pd.DataFrame({"income >50K": (signal + rng.normal(0, 0.5, n) > 0.5).astype(np.int64),
                      "marital status": np.digitize(signal + rng.normal(0, 1, n), [-0.5, 0.5]).astype(np.int64),
                      "spend": 3.0 * signal + rng.normal(0, 1, n)})
    return X, Y


@pytest.mark.parametrize(("model", "params"), [
    ("mmoe", {"d_embedding": 4, "n_experts": 2, "expert_d_hidden": [16], "tower_d_hidden": [8]}),
    ("xgboost", {"n_rounds": 4, "max_depth": 2}),
])
def test_the_estimator_gives_the_pipelines_test_metrics(model: str, params: dict[str, Any], tmp_path: Path,
                                                       one_torch_thread: None) -> None:
    from multitab.config.data import PreprocessConfig
    from multitab.datasets.infer import infer_features
    from multitab.datasets.preprocess import preprocess
    from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task
    from multitab.runs.record import RunConfig
    from multitab.training.run import RunSpec, run_training

    X, Y = _table()
    rows = {"train": slice(0, 160), "val": slice(160, 200), "test": slice(200, 240)}
    est = MultiTaskEstimator(model, model_params=params, max_epochs=2, batch_size=32, patience=3, random_state=7,
                             device="cpu")
    est.fit(X[rows["train"]], Y[rows["train"]], validation_data=(X[rows["val"]], Y[rows["val"]]))

    # the pipeline: the processed splits on disk (meta.json + Parquet, as the preprocess stage writes them), and
    # one run of them with the estimator's resolved hyperparameters (its `hparams_`: what a run's record holds)
    kinds = infer_features(X)
    features = tuple(Feature(c, "categorical" if c in kinds.categorical else "numerical") for c in X.columns)
    tasks = (Task("income >50K", "binary", "income >50K"), Task("marital status", "multiclass", "marital status",
                                                                 n_classes=3), Task("spend", "regression", "spend"))
    schema = DatasetSchema("table", tuple(RawColumn(f.name, "int", "feature") for f in features), features, tasks)
    frames = {k: pd.concat([X[r], Y[r]], axis=1).reset_index(drop=True) for k, r in rows.items()}
    processed = preprocess(schema, frames, PreprocessConfig(), {"source": "local", "standin": False})
    data = tmp_path / "processed"
    data.mkdir()
    for k, frame in processed.frames.items():
        frame.to_parquet(data / f"{k}.parquet", index=False)
    (data / "meta.json").write_text(json.dumps(processed.meta))
    train = {"max_epochs": 2 if model != "xgboost" else None, "patience": 3, "batch_size": 32, "max_train_rows": None,
             "precision": "fp32", "device": "cpu", "compile": False, "cuda_graph": False, "eval_batch_size": None,
             "deterministic": True, "num_threads": 0,
             "early_stopping_smoothing": None, "xgboost_early_stopping_rounds": 3, "protocol": "paper",
             "overrides": {}}
    run = RunConfig.from_record({"hparams": est.hparams_, "train": train, "progress": False}, "the estimator's run")
    record, _ = run_training(RunSpec("table", model, 7, data, tmp_path / "checkpoints"), run)

    assert record["hparams"]["source"] == "recipe"
    assert est.task_scores(X[rows["test"]], Y[rows["test"]]) == record["test"]  # same process: exactly equal


def test_pandas_in_and_out_with_labels_of_any_kind(one_torch_thread: None) -> None:
    X, Y = _table(120)
    Y = Y.assign(**{"income >50K": Y["income >50K"].map({0: "no", 1: "yes"}),
                    "marital status": Y["marital status"].map({0: "single", 1: "married", 2: "widowed"})})
    X.index = Y.index = X.index + 1000  # y's rows are X's: the same index
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    assert est.task_types_ == {"income >50K": "binary", "marital status": "multiclass", "spend": "regression"}
    assert {t: list(c) for t, c in est.classes_.items()} == {"income >50K": ["no", "yes"],
                                                           "marital status": ["married", "single", "widowed"]}
    pred = est.predict(X)
    assert list(pred.columns) == list(Y.columns) and (pred.index == X.index).all()
    assert set(pred["marital status"]) <= {"married", "single", "widowed"}
    proba = est.predict_proba(X.head(5))
    assert list(proba) == ["income >50K", "marital status"] and list(proba["marital status"].columns) == [
        "married", "single", "widowed"]
    assert np.allclose(proba["marital status"].sum(axis=1), 1.0)
    assert est.feature_kinds_.categorical == ("class of worker",)
    assert list(est.feature_names_in_) == list(X.columns) and est.n_features_in_ == 3
    assert np.isfinite(est.score(X, Y))


def test_predictions_follow_the_rows(one_torch_thread: None) -> None:
    X, Y = _table(120)
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    order = np.random.default_rng(1).permutation(len(X))
    whole, shuffled, one = est.predict(X), est.predict(X.iloc[order]), est.predict(X.iloc[[5]])
    pd.testing.assert_frame_equal(whole.iloc[order], shuffled)
    pd.testing.assert_frame_equal(whole.iloc[[5]], one, atol=1e-5)


def test_refit_and_pickle_give_the_same_predictions(one_torch_thread: None) -> None:
    X, Y = _table(120)
    a = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    b = clone(a).fit(X, Y)
    c = pickle.loads(pickle.dumps(a))
    for other in (b, c):
        pd.testing.assert_frame_equal(a.predict(X), other.predict(X))
        for t, p in a.predict_proba(X).items():
            pd.testing.assert_frame_equal(p, other.predict_proba(X)[t])


def test_the_recipe_follows_the_width_and_a_file_can_be_given(one_torch_thread: None) -> None:
    X, Y = _table(60)
    wide = pd.concat([X, pd.DataFrame(np.random.default_rng(0).normal(size=(60, 50)),
                                      columns=[f"f{i}" for i in range(50)])], axis=1)
    est = MultiTaskEstimator("stl_mlp", max_epochs=1).fit(wide, Y)
    assert est.hparams_["model"]["d_embedding"] == 8 and est.hparams_["source"] == "recipe"
    root = Path(__file__).resolve().parents[1]
    est = MultiTaskEstimator("stl_mlp", hparams=root / "hparams/authors/higgs/stl_mlp.yaml", **TINY).fit(X, Y)
    assert est.hparams_["model"]["d_hidden"] == (8,) and est.hparams_["optim"]["lr"] == 0.001


def test_bad_input_is_refused_naming_what(one_torch_thread: None) -> None:
    X, Y = _table(60)
    with pytest.raises(NotFittedError):
        MultiTaskEstimator("stl_mlp").predict(X)
    est = MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y)
    with pytest.raises(ValueError, match=r"task 'marital status' row 0: label 7 was not in the training labels"):
        est.score(X, Y.assign(**{"marital status": 7}))
    with pytest.raises(ValueError, match=r"column 'wage/hour' row 3"):
        est.predict(X.assign(**{"wage/hour": [1.0, 2.0, 3.0, np.nan] + [0.0] * 56}))
    with pytest.raises(ValueError, match=r"columns \['spend'\] are both a feature"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X.assign(spend=1.0), Y)
    with pytest.raises(ValueError, match=r"task 'marital status' is binary but holds 3 distinct labels"):
        MultiTaskEstimator("stl_mlp", task_types={"marital status": "binary"}, **TINY).fit(X, Y)
    with pytest.raises(ValueError, match=r"validation_data: feature column\(s\) \['wage/hour'\] missing"):
        MultiTaskEstimator("stl_mlp", **TINY).fit(X, Y, validation_data=(X.drop(columns="wage/hour"), Y))
    with pytest.raises(ValueError, match=r"model='mlp' is not a registered model; the registry: \[.*'mmoe'"):
        MultiTaskEstimator("mlp").fit(X, Y)
    # the argument that gave the keyword is named, not the recipe file it was laid over
    with pytest.raises(ValueError, match=r"^model_params\['n_blocks'\]: not a keyword of stl_mlp"):
        MultiTaskEstimator("stl_mlp", model_params={"n_blocks": 2}).fit(X, Y)


def test_the_docstring_example_runs(one_torch_thread: None) -> None:
    result = doctest.testmod(multitab.estimator, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0
