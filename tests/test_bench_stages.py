"""MultiTab-Bench stages: params (Table 11 + Figure 6 configs), synthesize@<config> output format and split,
label_correlations outputs, the command line, and the DVC wiring."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from multitab.config import ConfigError, parse_params, read_yaml
from multitab.datasets.bench import generate
from multitab.datasets.schema import schema_from_meta
from multitab.runtime.exit_codes import BAD_INPUT
from stages import label_correlations as label_correlations_stage
from stages import synthesize as synthesize_stage

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def params() -> dict:
    return read_yaml(ROOT / "params.yaml")


def _small_params(params: dict, tmp_path: Path, n_samples: int = 2000, targets: str | None = None) -> Path:
    small = json.loads(json.dumps(params))
    small["bench"]["data"]["n_samples"] = n_samples
    if targets is not None:
        small["bench"]["data"]["targets"] = targets
    lc = small["bench"]["label_correlations"]
    lc.update(n_datasets=4, n_samples=1500, n_features=8, grid_points=3)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(small))
    return path


# ---------------------------------------------------------------------------------------------------
# Params: the paper's configurations.
def test_configs_cover_table_11_and_figure_6(params: dict) -> None:
    bench = parse_params(params).bench
    data = bench.data
    assert (data.n_features, data.noise) == (32, 0.01)
    assert data.split.method == "shuffle" and (data.split.val_fraction, data.split.test_fraction) == (
        0.15,
        0.15,
    )
    cfgs = bench.configs
    by_group: dict[str, set] = {}
    for c in cfgs.values():
        for g in c.groups:
            by_group.setdefault(g, set()).add((c.correlation, c.degrees))
    assert by_group["correlation"] == {(0.2, (3, 3, 3)), (0.6, (3, 3, 3)), (1.0, (3, 3, 3))}
    assert by_group["complexity"] == {(0.6, (3, 3, 3)), (0.6, (4, 4, 4)), (0.6, (5, 5, 5))}
    assert by_group["count"] == {(0.6, (3,) * 3), (0.6, (3,) * 5), (0.6, (3,) * 7)}
    assert len(by_group["nonuniform"]) == 2
    assert all(len(set(d)) > 1 for _, d in by_group["nonuniform"])
    # no dataset generated twice
    settings = [(c.correlation, c.degrees, c.seed) for c in cfgs.values()]
    assert len(settings) == len(set(settings))


def test_bad_config_fails_at_load_naming_it(params: dict) -> None:
    bad = json.loads(json.dumps(params))
    bad["bench"]["configs"]["oops"] = {
        "groups": ["count"],
        "correlation": -0.9,
        "degrees": [3, 3, 3],
        "seed": 0,
    }
    with pytest.raises(ConfigError, match=r"params.yaml: bench\.configs\.oops: correlation=-0\.9"):
        parse_params(bad)
    del bad["bench"]["configs"]["oops"]
    bad["bench"]["configs"]["typo"] = {"groups": ["count"], "corelation": 0.5, "degrees": [3], "seed": 0}
    with pytest.raises(ConfigError, match=r"params.yaml: bench.configs.typo.corelation: unknown key; known: \["):
        parse_params(bad)
    del bad["bench"]["configs"]["typo"]
    bad["bench"]["configs"]["grp"] = {"groups": ["colour"], "correlation": 0.5, "degrees": [3], "seed": 0}
    with pytest.raises(ConfigError, match="colour"):
        parse_params(bad)
    del bad["bench"]["configs"]["grp"]
    with pytest.raises(ConfigError, match="no MultiTab-Bench config 'nope'"):
        parse_params(bad).bench.dataset("nope")
    lc = json.loads(json.dumps(params))
    lc["bench"]["label_correlations"]["figure3_n_tasks"] = [1, 2]
    with pytest.raises(ConfigError, match="at least two tasks"):
        parse_params(lc)


# ---------------------------------------------------------------------------------------------------
# synthesize@<config>.
@pytest.fixture(scope="module")
def synthesized(params: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("synth")
    p = _small_params(params, tmp, targets="standard")  # the option; raw targets: test below
    out = tmp / "data" / "synthetic" / "p04_pdmix_t7"
    assert synthesize_stage.main(["--params", str(p), "--config", "p04_pdmix_t7", "--out", str(out)]) == 0
    return p, out


def test_meta_json_format(synthesized: tuple[Path, Path]) -> None:
    _, out = synthesized
    assert sorted(os.listdir(out)) == ["meta.json", "test.parquet", "train.parquet", "val.parquet"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dataset"] == "p04_pdmix_t7"
    assert meta["features"] == [
        {"name": f"x{i:02d}", "kind": "numerical", "cardinality": None} for i in range(32)
    ]
    assert meta["tasks"] == [{"name": f"y{i}", "type": "regression", "n_classes": None} for i in range(1, 8)]
    assert meta["source"] == "synthetic" and meta["standin"] is False
    assert meta["n_rows"] == {"train": 1400, "val": 300, "test": 300}
    assert set(meta["target_stats"]) == {f"y{i}" for i in range(1, 8)}
    assert all(s["std"] > 0 for s in meta["target_stats"].values())
    g = meta["generator"]
    assert g["correlation"] == 0.4 and g["degrees"] == [1, 3, 2, 3, 4, 2, 3] and g["groups"] == ["nonuniform"]
    assert g["noise"] == [0.01] * 7 and g["n_samples"] == 2000 and g["n_features"] == 32
    W = np.asarray(g["weights"])
    np.testing.assert_allclose(W @ W.T, np.where(np.eye(7, dtype=bool), 1.0, 0.4), atol=1e-6)
    schema = schema_from_meta(meta)
    assert schema.n_num == 32 and schema.n_cat == 0 and len(schema.tasks) == 7
    for split in ("train", "val", "test"):
        df = pd.read_parquet(out / f"{split}.parquet")
        assert list(df.columns) == schema.canonical_columns
        assert (df.dtypes == np.float32).all()
        assert len(df) == meta["n_rows"][split]
        assert np.isfinite(df.to_numpy()).all()


def test_raw_targets_are_the_generated_labels() -> None:
    """bench.data.targets: raw (the authors' code): the generated y, target_stats the identity."""
    from multitab.config.data import SplitConfig
    from multitab.datasets.bench import synthesize

    split = SplitConfig(method="shuffle", seed=0, val_fraction=0.2, test_fraction=0.2)
    frames, meta = synthesize("raw", n_samples=200, n_features=4, correlation=0.5, degrees=[1, 2], noise=0.01,
                              seed=0, split=split)
    X, Y, _ = generate(200, 4, 0.5, [1, 2], 0.01, 0)
    assert meta["target_transform"] == "raw"
    assert meta["target_stats"] == {"y1": {"mean": 0.0, "std": 1.0}, "y2": {"mean": 0.0, "std": 1.0}}
    got = np.concatenate([frames[s][["y1", "y2"]].to_numpy() for s in ("train", "val", "test")])
    np.testing.assert_array_equal(np.sort(got, axis=0), np.sort(Y.astype(np.float32), axis=0))


def test_split_is_a_disjoint_partition_and_targets_use_train_stats(synthesized: tuple[Path, Path]) -> None:
    _, out = synthesized
    meta = json.loads((out / "meta.json").read_text())
    g = meta["generator"]
    X, Y, _ = generate(g["n_samples"], g["n_features"], g["correlation"], g["degrees"], g["noise"], g["seed"])
    frames = {s: pd.read_parquet(out / f"{s}.parquet") for s in ("train", "val", "test")}
    feats = [f["name"] for f in meta["features"]]
    tasks = [t["name"] for t in meta["tasks"]]
    # Each generated row lands in exactly one split (rows are identified by their feature bytes).
    row_of = {X[i].tobytes(): i for i in range(len(X))}
    assert len(row_of) == len(X)
    seen: dict[str, np.ndarray] = {}
    for s, df in frames.items():
        idx = np.array([row_of[r.tobytes()] for r in df[feats].to_numpy()])
        seen[s] = idx
        # targets: (y - train mean) / train std, with the train statistics of meta.json for every split
        stats = meta["target_stats"]
        raw = df[tasks].to_numpy(np.float64) * [stats[t]["std"] for t in tasks] + [
            stats[t]["mean"] for t in tasks
        ]
        np.testing.assert_allclose(raw, Y[idx], rtol=1e-4, atol=1e-4)
    all_idx = np.concatenate(list(seen.values()))
    assert len(all_idx) == len(X) and len(np.unique(all_idx)) == len(X)
    train_y = frames["train"][tasks].to_numpy(np.float64)
    np.testing.assert_allclose(train_y.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(train_y.std(axis=0), 1.0, atol=1e-4)
    assert abs(frames["val"][tasks].to_numpy().mean()) > 1e-7  # val is not re-standardised on itself


def test_synthesize_is_deterministic(synthesized: tuple[Path, Path], tmp_path: Path) -> None:
    p, out = synthesized
    again = tmp_path / "again"
    assert synthesize_stage.main(["--params", str(p), "--config", "p04_pdmix_t7", "--out", str(again)]) == 0
    for s in ("train", "val", "test"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(out / f"{s}.parquet"), pd.read_parquet(again / f"{s}.parquet")
        )
    assert (out / "meta.json").read_text() == (again / "meta.json").read_text()


def test_synthesize_unknown_config_fails_cleanly(
    synthesized: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    p, _ = synthesized
    out = tmp_path / "x"
    assert synthesize_stage.main(["--params", str(p), "--config", "nope", "--out", str(out)]) == BAD_INPUT
    assert "no MultiTab-Bench config 'nope'" in capsys.readouterr().err
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------
# label_correlations.
def test_label_correlations_stage(params: dict, tmp_path: Path) -> None:
    p = _small_params(params, tmp_path)
    figs, tables = tmp_path / "figures", tmp_path / "tables"
    rc = label_correlations_stage.main(["--params", str(p), "--figures", str(figs), "--tables", str(tables)])
    assert rc == 0
    for name in ("fig3_label_correlations", "fig4_label_correlations"):
        assert (figs / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    t3 = pd.read_csv(tables / "fig3_label_correlations.csv")
    np.testing.assert_allclose(t3["p"], [0.0, 0.5, 1.0])
    for k in (1, 2, 3, 4):
        for t in (2, 4):
            key = f"pd{k}_t{t}"
            assert {f"{key}_{s}" for s in ("mean", "std", "lower", "upper", "exact")} <= set(t3.columns)
            np.testing.assert_allclose(t3[f"{key}_mean"], t3[f"{key}_exact"], atol=0.06)
            assert (t3[f"{key}_lower"] <= t3[f"{key}_mean"]).all() and (
                t3[f"{key}_mean"] <= t3[f"{key}_upper"]
            ).all()
    # correlations fall with the degree (compared at p = 0.5): PD 1 above PD 2 above PD 4
    mid = t3.iloc[1]
    assert mid["pd1_t2_mean"] > mid["pd2_t2_mean"] > mid["pd4_t2_mean"]
    t4 = pd.read_csv(tables / "fig4_label_correlations.csv")
    assert {"pd234_T1T2_mean", "pd234_T1T3_mean", "pd234_T2T3_mean", "pd234_all_mean"} <= set(t4.columns)


# ---------------------------------------------------------------------------------------------------
# DVC wiring.
def test_dvc_yaml_stages_read_only_their_params(params: dict) -> None:
    from multitab.runs.stages import synthetic_data

    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    syn = dvc["stages"]["synthesize"]
    assert syn["foreach"] == "${synthetic_data}"
    assert syn["do"]["params"] == ["bench.data", "bench.configs.${item.options.config}", "${item.profile_data}"]
    assert syn["do"]["cmd"].endswith("--out ${item.out}") and syn["do"]["outs"] == ["${item.out}"]
    # runs.yaml's entry of each configuration: data/synthetic/<config>, its own params (bench.data twice)
    assert synthetic_data(parse_params(params), []) == {
        c: {"options": {"config": c}, "out": f"data/synthetic/{c}", "verdict": f"data/validated/synthetic/{c}.json",
            "profile_data": "bench.data"}
        for c in params["bench"]["configs"]
    }
    lc = dvc["stages"]["label_correlations"]
    assert lc["params"] == ["bench.label_correlations"]
    assert [next(iter(o)) for o in lc["outs"]] == ["results/label_correlations"]
    assert "--figures results/label_correlations --tables results/label_correlations" in lc["cmd"]
    # the top-level data-series plots name columns the stage writes (default params)
    written = {
        "results/label_correlations/fig3_label_correlations.csv": {
            f"pd{k}_t{t}_mean" for k in (1, 2, 3, 4) for t in (2, 4)
        },
        "results/label_correlations/fig4_label_correlations.csv": {
            "pd234_T1T2_mean",
            "pd234_T1T3_mean",
            "pd234_T2T3_mean",
        },
    }
    plots = yaml.safe_load((ROOT / "results" / "dvc.yaml").read_text())["plots"]  # paths relative to results/
    for plot in plots:
        if not isinstance(plot, dict):
            continue  # a plain file entry (another stage's figure)
        spec = next(iter(plot.values()))
        if isinstance(spec, dict) and any("label_correlations" in f for f in spec.get("y", {})):
            for f, cols in spec["y"].items():
                assert set(cols) <= written[f"results/{f}"], (f, cols)


@pytest.mark.skipif(
    shutil.which("dvc") is None and not (Path(sys.executable).parent / "dvc").exists(), reason="dvc"
)
def test_dvc_lists_one_stage_per_config(params: dict) -> None:
    dvc = shutil.which("dvc") or str(Path(sys.executable).parent / "dvc")
    out = subprocess.run(
        [dvc, "stage", "list", "--name-only"], cwd=ROOT, check=True, capture_output=True, text=True
    )
    names = set(out.stdout.split())
    assert {f"synthesize@{c}" for c in params["bench"]["configs"]} | {"label_correlations"} <= names
