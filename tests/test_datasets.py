"""Schemas, stand-ins, splits and preprocessing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multitab.config import ConfigError, build, load_params
from multitab.config.data import PreprocessConfig, SplitConfig
from multitab.datasets.preprocess import preprocess
from multitab.datasets.schema import SCHEMAS, get_schema, schema_from_meta
from multitab.datasets.split import SplitError, canonicalize, split_frames
from multitab.datasets.standin import write_standin
from multitab.registry import DATASET_NAMES

ROOT = Path(__file__).resolve().parents[1]


def standin_frames(name: str, rows: dict[str, int], seed: int, tmp_path: Path) -> dict[str, pd.DataFrame]:
    schema = get_schema(name)
    write_standin(schema, rows, seed, tmp_path)
    return {k: pd.read_parquet(tmp_path / f"{k}.parquet") for k in rows}


# ---------------------------------------------------------------------------------------------- schemas
@pytest.mark.parametrize(
    ("name", "n_num", "n_cat", "tasks"),
    [
        ("aliexpress", 60, 15, {"click": "binary", "conversion": "binary"}),
        ("acs_income", 0, 10, {"income": "binary", "marital": "multiclass"}),
        ("higgs", 17, 4, {"target": "binary", **{m: "regression" for m in
                                                 ["m_jj", "m_jjj", "m_lv", "m_jlv", "m_bb", "m_wbb", "m_wwbb"]}}),
    ],
)
def test_schema_matches_table1(name: str, n_num: int, n_cat: int, tasks: dict[str, str]) -> None:
    s = get_schema(name)
    assert (s.n_num, s.n_cat) == (n_num, n_cat)
    assert {t.name: t.type for t in s.tasks} == tasks
    # Every input feature and every label source is a raw column.
    raw = {c.name for c in s.raw_columns}
    assert set(s.feature_names) <= raw and {t.column for t in s.tasks} <= raw
    assert not set(s.feature_names) & {t.column for t in s.tasks}, "a target must not be an input"


def test_unknown_dataset_is_named() -> None:
    with pytest.raises(KeyError, match="unknown dataset 'adult'"):
        get_schema("adult")


def test_the_config_package_knows_the_registered_datasets_by_name() -> None:
    assert tuple(SCHEMAS) == DATASET_NAMES


# ----------------------------------------------------------------------------------------------- config
def test_params_file_loads_for_every_dataset() -> None:
    for name in SCHEMAS:
        cfg = load_params(ROOT / "params.yaml").dataset(name)
        assert cfg.source in {"standin", "local", "remote"}


def test_config_rejects_unknown_and_missing_keys() -> None:
    good = {"method": "shuffle", "seed": 0, "val_fraction": 0.1, "test_fraction": 0.1}
    assert build(SplitConfig, good, "x").val_fraction == 0.1
    with pytest.raises(ConfigError, match=r"params.yaml: datasets.higgs.split.val_fractoin: unknown key; known: \["):
        build(SplitConfig, {**good, "val_fractoin": 0.2}, "params.yaml: datasets.higgs.split")
    with pytest.raises(ConfigError, match="missing key 'seed'"):
        build(SplitConfig, {k: v for k, v in good.items() if k != "seed"}, "x")
    with pytest.raises(ConfigError, match="not one of"):
        build(SplitConfig, {**good, "method": "random"}, "x")
    with pytest.raises(ConfigError, match="expected a number"):
        build(SplitConfig, {**good, "seed": 0, "val_fraction": "a"}, "x")


def test_params_name_the_missing_dataset_the_missing_section_and_an_unknown_key(tmp_path: Path) -> None:
    p = tmp_path / "params.yaml"
    p.write_text("datasets: {}\n")
    with pytest.raises(ConfigError, match="params.yaml: missing key 'datasets.higgs'"):
        load_params(p).dataset("higgs")
    with pytest.raises(ConfigError, match=r"params.yaml: no `train:` section"):
        _ = load_params(p).train
    p.write_text("datasets: {}\ntrian: {}\n")
    known = r"params.yaml: trian: unknown key; known: \['protocol', 'models', 'datasets'"
    with pytest.raises(ConfigError, match=known):
        load_params(p)


# --------------------------------------------------------------------------------------------- stand-ins
def test_standin_is_deterministic_and_has_the_raw_schema(tmp_path: Path) -> None:
    a = standin_frames("higgs", {"data": 3000}, 5, tmp_path / "a")
    b = standin_frames("higgs", {"data": 3000}, 5, tmp_path / "b")
    c = standin_frames("higgs", {"data": 3000}, 6, tmp_path / "c")
    pd.testing.assert_frame_equal(a["data"], b["data"])
    assert not a["data"].equals(c["data"])
    schema = get_schema("higgs")
    assert list(a["data"].columns) == [col.name for col in schema.raw_columns]
    assert all(a["data"][col.name].dtype == np.float32 for col in schema.raw_columns)
    assert set(np.unique(a["data"]["jet1_btag"])) <= set(
        np.float32(v) for v in (0.0, 1.0865380764007568, 2.1730761528015137))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_standin_class_balance_close_to_table1(name: str, tmp_path: Path) -> None:
    schema = get_schema(name)
    rows = {k: 30_000 for k in schema.raw_files}
    frames = standin_frames(name, rows, 3, tmp_path)
    canon = pd.concat([canonicalize(schema, f, k) for k, f in frames.items()])
    for t in schema.tasks:
        if t.class_ratio is None:
            continue
        share = canon[t.name].value_counts(normalize=True).sort_index().to_numpy() * 100
        assert np.allclose(share, t.class_ratio, atol=2.0), (t.name, share, t.class_ratio)


def test_standin_tasks_are_learnable_and_correlated(tmp_path: Path) -> None:
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.metrics import roc_auc_score

    schema = get_schema("higgs")
    raw = standin_frames("higgs", {"data": 20_000}, 1, tmp_path)["data"]
    canon = canonicalize(schema, raw, "x")
    x = canon[schema.feature_names].to_numpy(dtype=np.float64)
    x = np.concatenate([x, np.log(np.abs(x) + 1e-3)], axis=1)
    half = len(x) // 2
    r2 = LinearRegression().fit(x[:half], canon["m_bb"][:half]).score(x[half:], canon["m_bb"][half:])
    assert r2 > 0.3, r2
    y = canon["target"].to_numpy()
    p = LogisticRegression(max_iter=500).fit(x[:half], y[:half]).predict_proba(x[half:])[:, 1]
    assert roc_auc_score(y[half:], p) > 0.7
    corr = np.corrcoef(canon[schema.task_names].to_numpy(dtype=np.float64).T)
    assert np.abs(corr[np.triu_indices_from(corr, 1)]).mean() > 0.1


def test_standin_rows_must_name_the_raw_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"standin.rows must name exactly the raw files \['train', 'test'\]"):
        write_standin(get_schema("aliexpress"), {"data": 100}, 0, tmp_path)


# -------------------------------------------------------------------------------------------------- split
def _canon(name: str, rows: dict[str, int], tmp_path: Path) -> dict[str, pd.DataFrame]:
    schema = get_schema(name)
    return {k: canonicalize(schema, f, k) for k, f in standin_frames(name, rows, 2, tmp_path).items()}


def test_ordered_split_is_first_and_last_rows(tmp_path: Path) -> None:
    schema = get_schema("higgs")
    data = _canon("higgs", {"data": 1000}, tmp_path)
    parts = split_frames(schema, data, SplitConfig("ordered", 0, 0.05, 0.05))
    pd.testing.assert_frame_equal(parts["val"], data["data"].iloc[:50].reset_index(drop=True))
    pd.testing.assert_frame_equal(parts["test"], data["data"].iloc[950:].reset_index(drop=True))
    assert len(parts["train"]) == 900


def test_official_test_split_keeps_test_and_stratifies(tmp_path: Path) -> None:
    schema = get_schema("aliexpress")
    data = _canon("aliexpress", {"train": 20_000, "test": 500}, tmp_path)
    parts = split_frames(schema, data, SplitConfig("official_test", 0, 0.1))
    pd.testing.assert_frame_equal(parts["test"], data["test"])
    assert len(parts["val"]) == pytest.approx(2000, abs=3)
    # stratified on the label combination: each combination's share of val is rounded on its own
    combos = data["train"].groupby(["click", "conversion"]).size()
    in_val = parts["val"].groupby(["click", "conversion"]).size()
    assert {k: int(in_val.get(k, 0)) for k in combos.index} == {k: round(n * 0.1) for k, n in combos.items()}
    assert (combos.index.get_level_values("conversion") == 1).any()  # the rare task's positives are there


@settings(max_examples=25, deadline=None)
@given(n=st.integers(40, 400), seed=st.integers(0, 2**16))
def test_shuffle_split_partitions_rows_and_is_stable(n: int, seed: int) -> None:
    schema = get_schema("acs_income")
    data = pd.DataFrame({c: np.arange(n) for c in schema.canonical_columns})
    cfg = SplitConfig("shuffle", seed, 0.15, 0.15)
    parts = split_frames(schema, {"data": data}, cfg)
    ids = np.concatenate([parts[k]["AGEP"].to_numpy() for k in ("train", "val", "test")])
    assert sorted(ids) == list(range(n))
    again = split_frames(schema, {"data": data}, cfg)
    for k in parts:
        pd.testing.assert_frame_equal(parts[k], again[k])


def test_split_rejects_fractions_that_empty_a_split() -> None:
    schema = get_schema("higgs")
    data = pd.DataFrame({c: np.zeros(10) for c in schema.canonical_columns})
    with pytest.raises(SplitError, match="val_fraction=0.01 leaves an empty split"):
        split_frames(schema, {"data": data}, SplitConfig("ordered", 0, 0.01, 0.1))


def test_canonicalize_names_file_column_and_row(tmp_path: Path) -> None:
    schema = get_schema("acs_income")
    raw = standin_frames("acs_income", {"data": 100}, 0, tmp_path)["data"]
    bad = raw.copy()
    bad.loc[7, "MAR"] = 9
    with pytest.raises(SplitError, match=r"acs.parquet: column 'MAR' row 7: value 9 is not one of the marital"):
        canonicalize(schema, bad, "acs.parquet")
    with pytest.raises(SplitError, match=r"acs.parquet: missing column\(s\) \['ST'\]"):
        canonicalize(schema, raw.drop(columns="ST"), "acs.parquet")


# -------------------------------------------------------------------------------------------- preprocess
def _processed(name: str, tmp_path: Path, **cfg: object):
    schema = get_schema(name)
    data = _canon(name, {k: 3000 for k in schema.raw_files}, tmp_path)
    method = {"aliexpress": "official_test", "acs_income": "shuffle", "higgs": "ordered"}[name]
    parts = split_frames(schema, data, SplitConfig(method, 0, 0.15, 0.15))
    pcfg = dataclasses.replace(PreprocessConfig(), **cfg)  # type: ignore[arg-type]
    return schema, parts, preprocess(schema, parts, pcfg, {"source": "standin", "standin": True})


def test_preprocess_meta_and_shapes(tmp_path: Path) -> None:
    schema, parts, out = _processed("higgs", tmp_path, targets="standard")
    assert list(out.frames["train"].columns) == schema.canonical_columns
    assert out.meta["n_rows"] == {k: len(v) for k, v in parts.items()}
    assert out.meta["standin"] is True and out.meta["source"] == "standin"
    s2 = schema_from_meta(out.meta)
    assert (s2.n_num, s2.n_cat, s2.task_names) == (17, 4, schema.task_names)
    assert all(f["cardinality"] == 4 for f in out.meta["features"] if f["kind"] == "categorical")
    train = out.frames["train"]
    for f in schema.features:
        if f.kind == "numerical":
            assert train[f.name].dtype == np.float32
            assert abs(train[f.name].mean()) < 0.1 and 0.85 < train[f.name].std() < 1.15
    for t in schema.tasks:
        if t.type == "regression":
            assert abs(float(train[t.name].mean())) < 1e-4 and abs(float(train[t.name].std()) - 1) < 1e-3
    assert out.meta["target_transform"] == "standard"


def test_raw_regression_targets_are_kept_as_they_are(tmp_path: Path) -> None:
    """The default (the authors' notebook; the paper is silent): raw targets, mapped back by the
    identity (target_stats mean 0, std 1)."""
    schema, parts, out = _processed("higgs", tmp_path)
    assert out.meta["target_transform"] == "raw"
    for t in schema.tasks:
        if t.type == "regression":
            assert out.meta["target_stats"][t.name] == {"mean": 0.0, "std": 1.0}
            for split in ("train", "val", "test"):
                np.testing.assert_array_equal(
                    out.frames[split][t.name].to_numpy(), parts[split][t.name].to_numpy(np.float32)
                )


def test_preprocess_fits_on_train_only(tmp_path: Path) -> None:
    schema, parts, out = _processed("higgs", tmp_path)
    shifted = dict(parts)
    shifted["test"] = parts["test"].copy()
    shifted["test"]["lepton_pT"] = shifted["test"]["lepton_pT"] * 10 + 5
    shifted["val"] = parts["val"].iloc[::-1].reset_index(drop=True)
    again = preprocess(schema, shifted, PreprocessConfig(), {"source": "standin", "standin": True})
    pd.testing.assert_frame_equal(out.frames["train"], again.frames["train"])
    assert out.meta["target_stats"] == again.meta["target_stats"]


def test_unseen_categories_map_to_reserved_index(tmp_path: Path) -> None:
    schema, parts, _ = _processed("acs_income", tmp_path)
    parts = dict(parts)
    parts["test"] = parts["test"].copy()
    parts["test"].loc[:4, "OCCP"] = 999_999  # never seen in train
    out = preprocess(schema, parts, PreprocessConfig(), {"source": "standin", "standin": True})
    assert (out.frames["test"]["OCCP"].iloc[:5] == 0).all()
    assert (out.frames["train"]["OCCP"] >= 1).all()
    card = {f["name"]: f["cardinality"] for f in out.meta["features"]}
    assert out.frames["train"]["OCCP"].max() == card["OCCP"] - 1


@pytest.mark.parametrize("method", ["standard", "none"])
def test_numerical_method_is_configurable(method: str, tmp_path: Path) -> None:
    schema, parts, out = _processed("higgs", tmp_path, numerical=method)
    col = out.frames["train"]["lepton_pT"]
    if method == "none":
        np.testing.assert_allclose(col, parts["train"]["lepton_pT"])
    else:
        assert abs(col.mean()) < 1e-4
