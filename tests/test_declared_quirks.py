"""A real table's ordinary quirks do not stop a dataset declared in params.yaml (issue 61, item 6), each written from
what real samples did (statsmodels' randhie, star98 and fair_pt samples: docs/extending.md): a rare binary class the
split left out of a split, a feature constant in the training rows of a sample, a category of a small file that
train never saw, a quantile-transformed column with heavy ties on 80 training rows. What still stops names the
params.yaml key that would change it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from multitab.config import load_params
from multitab.runs.document import render
from multitab.runs.types import RUNS_FILE
from multitab.runtime.exit_codes import BAD_INPUT
from stages import acquire, preprocess, split, train, validate_processed, validate_raw

ROOT = Path(__file__).resolve().parents[1]
SHUFFLE = {"method": "shuffle", "seed": 0, "val_fraction": 0.15, "test_fraction": 0.15}


def _project(tmp: Path, entry: dict[str, Any], **validation: Any) -> Path:
    """The repository's params.yaml with `entry` declared as dataset `mine` (as docs/extending.md shows), and
    `validation` laid over its `validation:` section."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"]["mine"] = {"source": "local", **entry}
    for key, value in validation.items():
        params["validation"][key] = {**params["validation"][key], **value}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def _table(tmp: Path, frame: pd.DataFrame, name: str = "table.csv") -> str:
    path = tmp / name
    frame.to_csv(path, index=False)
    return str(path)


class Stages:
    """The data stages of dataset `mine` as dvc.yaml runs them, in-process, in `tmp`."""

    def __init__(self, tmp: Path, params: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp, self.capsys = tmp, capsys
        self.p, self.d = ["--params", str(params)], ["--dataset", "mine"]
        self.raw, self.splits, self.processed = tmp / "raw", tmp / "splits", tmp / "data" / "processed" / "mine"
        self.gx = ["--context", str(tmp / "gx"), "--report", str(tmp / "reports")]
        self.verdict = tmp / "data" / "validated" / "mine.json"  # where a run of runs.yaml looks for it
        self.text = ""

    def _ran(self, rc: int) -> int:
        captured = self.capsys.readouterr()
        self.text = captured.out + captured.err
        return rc

    def acquire(self) -> int:
        return self._ran(acquire.main([*self.p, *self.d, "--out", str(self.raw)]))

    def split(self) -> int:
        return self._ran(split.main([*self.p, *self.d, "--raw", str(self.raw), "--out", str(self.splits)]))

    def validate_raw(self) -> int:
        return self._ran(validate_raw.main([*self.p, *self.d, "--splits", str(self.splits), "--out",
                                            str(self.tmp / "raw.json"), *self.gx]))

    def preprocess(self) -> int:
        return self._ran(preprocess.main([*self.p, *self.d, "--splits", str(self.splits), "--out",
                                          str(self.processed), "--verdict", str(self.tmp / "raw.json")]))

    def validate_processed(self) -> int:
        return self._ran(validate_processed.main([*self.p, "--processed", str(self.processed), "--out",
                                                  str(self.verdict), *self.gx]))

    def frames(self) -> dict[str, pd.DataFrame]:
        return {k: pd.read_parquet(self.splits / f"{k}.parquet") for k in ("train", "val", "test")}


# ------------------------------------------------------------------------------------------------ the split
def test_two_positives_in_100_training_rows_give_the_10_percent_validation_split_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The reproduction: official_test, a binary task with 2 positives in the 100 rows of train.csv;
    # validation is 10 % of them, stratified on the label combination, which rounded the positives' share to none.
    rng = np.random.default_rng(1)
    folder = tmp_path / "mine"
    folder.mkdir()
    train = pd.DataFrame({"row": np.arange(100) + 0.5, "x": rng.normal(size=100),
                          "rare": np.r_[np.zeros(98, int), 1, 1], "common": rng.integers(0, 2, 100)})
    test = pd.DataFrame({"row": np.arange(40) + 1000.5, "x": rng.normal(size=40),
                         "rare": np.r_[np.zeros(37, int), 1, 1, 1], "common": rng.integers(0, 2, 40)})
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    params = _project(tmp_path, {"local": {"path": str(folder)}, "tasks": {"rare": "binary", "common": "binary"},
                                 "split": {"method": "official_test", "seed": 0, "val_fraction": 0.1}})
    s = Stages(tmp_path, params, capsys)
    assert s.acquire() == 0 and s.split() == 0, s.text
    frames = s.frames()
    assert {k: len(f) for k, f in frames.items()} == {"train": 90, "val": 10, "test": 40}  # the sizes it had
    assert sorted(np.r_[frames["train"]["row"], frames["val"]["row"]]) == sorted(train["row"])  # the same rows
    for k, f in frames.items():
        assert set(f["rare"]) == {0, 1} and set(f["common"]) == {0, 1}, (k, f["rare"].tolist())
    assert s.validate_raw() == 0, s.text


def test_a_shuffle_gives_each_split_a_row_of_every_class_of_every_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    n = 100
    perm = np.random.default_rng(0).permutation(n)  # the shuffle's draw for seed 0: val perm[:15], test perm[15:30]
    rare = np.zeros(n, int)
    rare[perm[30:33]] = 1  # the draw puts all three positives in train
    ill = np.zeros(n, int)
    ill[perm[[0, 40, 41, 42]]] = 1  # and this task's four in train and val, none in test
    rng = np.random.default_rng(2)
    kind = np.array(["a", "b", "c"], dtype=object)[rng.integers(0, 3, n)]
    kind[perm[50]] = "lone"  # a multiclass class of one row: it cannot be in every split, and is not refused
    frame = pd.DataFrame({"row": np.arange(n) + 0.5, "x": rng.normal(size=n), "rare": rare, "ill": ill, "kind": kind})
    params = _project(tmp_path, {"local": {"path": _table(tmp_path, frame)}, "split": SHUFFLE,
                                 "tasks": {"rare": "binary", "ill": "binary", "kind": "multiclass"}})
    s = Stages(tmp_path, params, capsys)
    with caplog.at_level(logging.INFO, logger="multitab.datasets.split_classes"):
        assert s.acquire() == 0 and s.split() == 0, s.text
    frames = s.frames()
    assert {k: len(f) for k, f in frames.items()} == {"train": 70, "val": 15, "test": 15}
    assert sorted(pd.concat(frames.values())["row"]) == sorted(frame["row"])
    for k, f in frames.items():
        assert set(f["rare"]) == {0, 1} and set(f["ill"]) == {0, 1}, k
        assert {0, 1, 2} <= set(f["kind"]), k  # a, b, c: the classes with a row for each split
    assert "swapped from train into val" in caplog.text and "'lone' of task 'kind' has 1 row(s)" in caplog.text


@pytest.mark.parametrize("case", ["fewer_rows_than_splits", "a_test_file_without_one", "ordered"])
def test_a_binary_class_that_cannot_be_in_every_split_is_refused_naming_task_count_and_key(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 60
    frame = pd.DataFrame({"x": np.random.default_rng(3).normal(size=n), "flag": np.r_[np.zeros(n - 2, int), 1, 1]})
    entry: dict[str, Any] = {"tasks": {"flag": "binary"}, "split": SHUFFLE}
    if case == "a_test_file_without_one":
        folder = tmp_path / "mine"
        folder.mkdir()
        frame.iloc[:-2].sample(frac=1.0, random_state=0).iloc[:20].to_csv(folder / "test.csv", index=False)
        frame.to_csv(folder / "train.csv", index=False)
        entry.update(local={"path": str(folder)}, split={"method": "official_test", "seed": 0, "val_fraction": 0.5})
        want = "datasets.mine.local.path: test.csv, the test split whole, holds no row of class 1 of binary task 'flag'"
    else:
        if case == "ordered":
            frame["flag"] = np.r_[np.zeros(n - 5, int), np.ones(5, int)]  # all five at the end: in test only
        entry.update(local={"path": _table(tmp_path, frame)},
                     split={**SHUFFLE, "method": "ordered"} if case == "ordered" else SHUFFLE)
        want = ("datasets.mine.split.method: ordered keeps the file's order, and its train rows (42) hold no row of "
                "class 1 of task 'flag'" if case == "ordered" else
                "datasets.mine.tasks.flag: class 1 has 2 row(s) in table.csv, fewer than the 3 splits cut from it")
    s = Stages(tmp_path, _project(tmp_path, entry), capsys)
    assert s.acquire() == 0, s.text
    assert s.split() == BAD_INPUT and want in s.text, s.text
    assert "Traceback" not in s.text and not s.splits.exists()


# ------------------------------------------------------------------------------------------------ constant features
def _with_constant(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    perm = np.random.default_rng(0).permutation(n)  # the shuffle's val + test rows: perm[:18]
    sparse = np.zeros(n)
    sparse[perm[[2, 12]]] = [1.5, 2.75]  # a column that is rarely non-zero, non-zero only outside train
    return pd.DataFrame({"note": np.arange(n), "x": rng.normal(size=n), "level": np.full(n, 2.5), "sparse": sparse,
                         "group": np.full(n, "same"), "y": np.tile([0, 1], n // 2), "amount": rng.normal(size=n)})


def test_a_feature_constant_in_the_training_rows_is_left_out_with_a_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    frame = _with_constant()
    entry = {"local": {"path": _table(tmp_path, frame)}, "tasks": {"y": "binary", "amount": "regression"},
             "features": {"drop": ["note"]}, "split": SHUFFLE}
    params = _project(tmp_path, entry)
    s = Stages(tmp_path, params, capsys)
    with caplog.at_level(logging.WARNING, logger="multitab.datasets.steps"):
        assert s.acquire() == 0 and s.split() == 0, s.text
    for column, held in (("level", "one value (2.5)"), ("sparse", "one value (0.0)"), ("group", "one value ('same')")):
        assert (f"mine: feature {column!r} holds {held} in all 42 training rows: left out "
                "(datasets.mine.features.constant: drop") in caplog.text
    record = json.loads((s.splits / "schema.json").read_text())
    assert record["constant"] == {"level": 2.5, "sparse": 0.0, "group": "same"}
    assert [f["name"] for f in record["features"]] == ["x"] and list(record["levels"]) == []
    assert list(s.frames()["val"].columns) == ["x", "y", "amount"]
    assert s.validate_raw() == 0, s.text  # no `constant` fact: the column is not there
    assert s.preprocess() == 0, s.text
    meta = json.loads((s.processed / "meta.json").read_text())
    assert meta["declared"]["left_out"] == {"note": "features.drop", **dict.fromkeys(
        ["level", "sparse", "group"], "one value in every training row (features.constant: drop)")}

    # the report lists them (metrics.json of a run -> report.md's "What ran")
    p = yaml.safe_load(params.read_text())
    p["train"].update(device="cpu", max_epochs=1, batch_size=32, max_train_rows=None, progress=False)
    p["runs"]["real"] = {"data": {"datasets": ["mine"]}, "models": ["stl_mlp"], "seeds": [0], "train": {}}
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    (tmp_path / "hparams").symlink_to(ROOT / "hparams")
    (tmp_path / RUNS_FILE).write_text(render(load_params(params)))
    assert s.validate_processed() == 0, s.text
    assert train.main(["--params", str(params), "--run", "real-mine-stl_mlp-0"]) == 0
    metrics = json.loads((tmp_path / "results" / "runs" / "mine" / "stl_mlp" / "seed0" / "metrics.json").read_text())
    assert metrics["columns_left_out"] == meta["declared"]["left_out"]
    from types import SimpleNamespace

    from multitab.evaluation.paper.report_markdown import what_ran_section

    run = SimpleNamespace(extra=metrics, seed=0, model="stl_mlp", standin=False)
    runs = SimpleNamespace(datasets=["mine"], models=lambda d: ["stl_mlp"], runs=lambda d, m: {0: run},
                           standin=lambda d: False)
    results = SimpleNamespace(runs=runs, config=SimpleNamespace(datasets=["mine"]), synthetic=[])
    provenance = SimpleNamespace(commit="c", params_sha256="p" * 16)
    text = "\n".join(what_ran_section(results, provenance))  # type: ignore[arg-type]
    assert ("- mine: columns of the file left out: note (features.drop); level (one value in every training row "
            "(features.constant: drop)); sparse (") in text


def test_features_constant_refuse_stops_the_split_naming_the_column_and_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = {"local": {"path": _table(tmp_path, _with_constant())}, "tasks": {"y": "binary", "amount": "regression"},
             "features": {"constant": "refuse"}, "split": SHUFFLE}
    s = Stages(tmp_path, _project(tmp_path, entry), capsys)
    assert s.acquire() == 0, s.text
    assert s.split() == BAD_INPUT
    assert ("datasets.mine.features.constant: refuse, but feature 'level' holds one value (2.5) in all 42 training "
            "rows") in s.text and "set constant: drop" in s.text, s.text


# ------------------------------------------------------------------------------------------------ unseen categories
@pytest.mark.parametrize("unseen_rows", [1, 6])
def test_a_category_train_never_saw_is_judged_against_the_rate_train_predicts(
    unseen_rows: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # fair_pt's 150-row sample: one test row of 22 with an occupation that train never had failed at a fixed 1 %
    n = 140
    perm = np.random.default_rng(0).permutation(n)  # test: perm[21:42]
    rng = np.random.default_rng(5)
    job = np.array(["a", "b", "c", "d", "e"])[rng.integers(0, 5, n)]
    job[perm[21 : 21 + unseen_rows]] = "z"  # a category only the test split holds
    frame = pd.DataFrame({"x": rng.normal(size=n), "job": job, "y": np.tile([0, 1], n // 2)})
    params = _project(tmp_path, {"local": {"path": _table(tmp_path, frame)}, "tasks": {"y": "binary"},
                                 "split": SHUFFLE})
    s = Stages(tmp_path, params, capsys)
    assert s.acquire() == 0 and s.split() == 0, s.text
    assert (s.frames()["test"]["job"] == 5).sum() == unseen_rows  # code 5: "z", the last of the sorted levels
    if unseen_rows == 1:  # 1 of 21 rows is sampling noise at 1 % (tolerated 0.21 + 4 x 0.46 rows)
        assert s.validate_raw() == 0, s.text
    else:  # 6 of 21 is not; the line names the key that would let it pass
        assert s.validate_raw() == BAD_INPUT
        assert "column 'job'" in s.text and "(unseen)" in s.text, s.text
        assert "to let it pass: params.yaml validation.policy.mine.categories: warn" in s.text


# ------------------------------------------------------------------------------------------------ validate_processed
def _ties(n: int = 114) -> pd.DataFrame:
    """The issue's reproduction: a numerical column with 7 distinct values, most rows 0 or 1, on 80 training rows
    (randhie's physlm in a 115-row sample)."""
    rng = np.random.default_rng(14)  # its 80 training rows hold all 7 values
    visits = rng.choice([0, 1, 1.5, 2.5, 4.5, 9.5, 19.5], size=n, p=[0.5, 0.3, 0.08, 0.05, 0.03, 0.02, 0.02])
    return pd.DataFrame({"visits": visits, "x": rng.normal(size=n), "y": rng.integers(0, 2, n)})


def test_a_quantile_transformed_column_with_heavy_ties_on_80_rows_passes_validate_processed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = _project(tmp_path, {"local": {"path": _table(tmp_path, _ties())}, "tasks": {"y": "binary"},
                                 "split": SHUFFLE})
    s = Stages(tmp_path, params, capsys)
    assert s.acquire() == 0 and s.split() == 0 and s.validate_raw() == 0 and s.preprocess() == 0, s.text
    train = pd.read_parquet(s.processed / "train.parquet")
    assert len(train) == 80 and pd.read_parquet(s.splits / "train.parquet")["visits"].nunique() == 7
    assert train["visits"].std() > 1.3  # outside validation.processed's [0.7, 1.3]
    assert s.validate_processed() == 0, s.text

    # what no quantile map of 10 quantiles gives 80 rows still stops, naming the key that lets it pass
    train["visits"] = 3.0 * train["visits"]
    train.to_parquet(s.processed / "train.parquet", index=False)
    assert s.validate_processed() == BAD_INPUT
    assert "[train] column 'visits'" in s.text and "(normal_std)" in s.text, s.text
    assert "to let it pass: params.yaml validation.processed.policy.mine: warn" in s.text
    p = yaml.safe_load(params.read_text())
    p["validation"]["processed"]["policy"] = {"mine": "warn"}
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    assert s.validate_processed() == 0, s.text
    verdict = json.loads(s.verdict.read_text())
    assert verdict["policy"] == {"distributions": "warn"} and any("(normal_std)" in w for w in verdict["warnings"])


def test_an_unknown_name_under_validation_processed_policy_is_refused(tmp_path: Path) -> None:
    from multitab.config import ConfigError

    params = _project(tmp_path, {"local": {"path": "x.csv"}, "tasks": {"y": "binary"}, "split": SHUFFLE},
                      processed={"policy": {"mien": "warn"}})
    with pytest.raises(ConfigError, match=r"validation.processed.policy: 'mien' is not .*did you mean 'mine'"):
        load_params(params)
