"""XGBoost behind the multitask interface: task grouping, multi-output trees, early stopping."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from multitab.datasets.schema import DatasetSchema, Feature, Task
from multitab.models import build_model

FEATURES = (Feature("a", "numerical"), Feature("b", "numerical"), Feature("c", "categorical", cardinality=4))
TINY = DatasetSchema(
    name="tiny",
    raw_columns=(),
    features=FEATURES,
    tasks=(
        Task("bin", "binary", column="bin"),
        Task("bin2", "binary", column="bin2"),
        Task("multi", "multiclass", column="multi", n_classes=3),
        Task("reg", "regression", column="reg"),
    ),
)
# every keyword (build_model uses no constructor default): few rounds, one thread, the CPU
FAST = {"max_depth": 6, "learning_rate": 0.1, "binary_learning_rate": 0.2, "n_rounds": 15, "early_stopping_rounds": 5,
        "multi_strategy": "multi_output_tree", "device": "cpu", "seed": 0, "n_threads": 1}


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x_num = rng.normal(size=(n, 2)).astype(np.float32)
    x_cat = rng.integers(0, 4, size=(n, 1))
    y = {
        "bin": (x_num[:, 0] > 0).astype(np.int64),
        "bin2": (x_cat[:, 0] > 1).astype(np.int64),
        "multi": x_cat[:, 0] % 3,
        "reg": (x_num[:, 1] + 0.1 * rng.normal(size=n)).astype(np.float32),
    }
    return x_num, x_cat, y


def fit(schema: DatasetSchema, **kw: object):
    x_num, x_cat, y = data(400, 0)
    xv, cv, yv = data(200, 1)
    names = schema.task_names
    model = build_model("xgboost", schema, {**FAST, **kw})
    return model.fit(
        x_num,
        x_cat,
        {k: y[k] for k in names},
        x_num_val=xv,
        x_cat_val=cv,
        targets_val={k: yv[k] for k in names},
    )


def test_outputs_follow_the_contract_and_learn() -> None:
    model = fit(TINY)
    assert [[t.name for t in g] for g in model.groups] == [["bin", "bin2"], ["reg"], ["multi"]]
    x_num, x_cat, y = data(300, 2)
    out = model.predict(x_num, x_cat)
    assert list(out) == TINY.task_names
    assert out["bin"].shape == (300,) and out["reg"].shape == (300,) and out["multi"].shape == (300, 3)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in out.values())
    assert ((out["bin"] > 0) == y["bin"]).mean() > 0.9  # logits: > 0 means class 1
    assert (out["multi"].argmax(1) == y["multi"]).mean() > 0.9
    assert np.corrcoef(out["reg"], y["reg"])[0, 1] > 0.9
    one = model.predict(x_num[:1], x_cat[:1])
    assert all(v.shape[0] == 1 for v in one.values())


def test_tasks_of_one_type_share_one_multi_output_model() -> None:
    both_binary = dataclasses.replace(TINY, tasks=TINY.tasks[:2])
    model = fit(both_binary)
    assert len(model.boosters) == 1
    assert model._params(model.groups[0])["multi_strategy"] == "multi_output_tree"
    out = model.predict(*data(50, 3)[:2])
    assert set(out) == {"bin", "bin2"} and not np.allclose(out["bin"], out["bin2"])


def test_binary_and_multiclass_are_one_model_per_task() -> None:
    acs_like = dataclasses.replace(TINY, tasks=(TINY.tasks[0], TINY.tasks[2]))
    model = fit(acs_like)
    assert len(model.boosters) == 2 and all(len(g) == 1 for g in model.groups)
    assert "multi_strategy" not in model._params(model.groups[0])


def test_deterministic_and_stops_early() -> None:
    a, b = fit(TINY, n_rounds=60), fit(TINY, n_rounds=60)
    x_num, x_cat, _ = data(50, 4)
    for k, v in a.predict(x_num, x_cat).items():
        np.testing.assert_array_equal(v, b.predict(x_num, x_cat)[k])
    assert all(1 <= r <= 60 for r in a.best_rounds)
    noise = dataclasses.replace(TINY, tasks=(Task("noise", "regression", column="noise"),))
    rng = np.random.default_rng(0)
    x_num, x_cat, _ = data(400, 0)
    model = build_model("xgboost", noise, {**FAST, "n_rounds": 200})
    model.fit(
        x_num,
        x_cat,
        {"noise": rng.normal(size=400)},
        x_num_val=x_num[:200],
        x_cat_val=x_cat[:200],
        targets_val={"noise": rng.normal(size=200)},
    )
    assert model.best_rounds[0] < 100  # validation loss on pure noise stops improving early


def test_save_and_load_round_trip(tmp_path) -> None:
    model = fit(TINY)
    model.save(tmp_path / "xgb")
    again = build_model("xgboost", TINY, FAST).load(tmp_path / "xgb")
    x_num, x_cat, _ = data(30, 5)
    for k, v in model.predict(x_num, x_cat).items():
        np.testing.assert_array_equal(v, again.predict(x_num, x_cat)[k])
    other = dataclasses.replace(TINY, tasks=TINY.tasks[:2])
    with pytest.raises(ValueError, match="task groups"):
        build_model("xgboost", other, FAST).load(tmp_path / "xgb")


def test_bad_inputs_raise_clear_errors() -> None:
    model = build_model("xgboost", TINY, FAST)
    x_num, x_cat, y = data(20, 0)
    with pytest.raises(RuntimeError, match="before fit"):
        model.predict(x_num, x_cat)
    with pytest.raises(ValueError, match=r"x_num \[N, 2\]"):
        model.fit(x_num[:, :1], x_cat, y, x_num_val=x_num, x_cat_val=x_cat, targets_val=y)
    with pytest.raises(KeyError, match="bin2"):
        model.fit(x_num, x_cat, {"bin": y["bin"]}, x_num_val=x_num, x_cat_val=x_cat, targets_val=y)
    with pytest.raises(ValueError, match="max_depth"):
        build_model("xgboost", TINY, {**FAST, "max_depth": 0})


def test_one_dmatrix_per_split_trains_the_boosters_of_one_dmatrix_per_task_group() -> None:
    """The features go into one DMatrix per split, each task group setting its labels on it: the boosters
    are byte for byte those trained on a DMatrix built per group from concatenated features."""
    xgb = pytest.importorskip("xgboost")
    model = fit(TINY)
    x_num, x_cat, y = data(400, 0)
    xv, cv, yv = data(200, 1)
    x, x_val = np.concatenate([x_num, x_cat.astype(np.float32)], 1), np.concatenate([xv, cv.astype(np.float32)], 1)
    for group, booster in zip(model.groups, model.boosters):
        def label(values: dict[str, np.ndarray], group: tuple[Task, ...] = group) -> np.ndarray:
            cols = [np.asarray(values[t.name], np.float32) for t in group]
            return np.stack(cols, 1) if len(cols) > 1 else cols[0]

        reference = xgb.train(model._params(group), xgb.DMatrix(x, label=label(y)), num_boost_round=FAST["n_rounds"],
                              evals=[(xgb.DMatrix(x_val, label=label(yv)), "val")],
                              early_stopping_rounds=FAST["early_stopping_rounds"], verbose_eval=False)
        assert booster.save_raw("json") == reference.save_raw("json"), [t.name for t in group]
