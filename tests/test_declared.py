"""A dataset declared in params.yaml only (multitab.datasets.declared): its files through acquire, split and
preprocess as one more DatasetSchema, and every bad declaration refused with one line naming the key and the column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from multitab.config import ConfigError, parse_params
from multitab.hparams.recipe import n_features
from multitab.runtime.exit_codes import BAD_INPUT
from stages import acquire, preprocess, split

WINE = Path(__file__).parent / "fixtures" / "wine_quality"
ROOT_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
SPLIT = {"method": "shuffle", "seed": 0, "val_fraction": 0.15, "test_fraction": 0.15}


def _params(tmp_path: Path, entry: dict[str, Any]) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"datasets": {"mine": {"source": "local", "split": SPLIT, **entry}}}, sort_keys=False))
    return p


def _table(tmp_path: Path, frame: pd.DataFrame) -> str:
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    return str(path)


def test_a_declared_table_is_acquired_split_and_preprocessed_with_its_own_column_names(tmp_path: Path) -> None:
    p = _params(tmp_path, {"local": {"path": str(WINE)}, "tasks": {"type": "binary", "quality": "multiclass"},
                           "features": {"categorical": ["pH"], "drop": ["density"]}})
    raw, splits, out = tmp_path / "raw", tmp_path / "splits", tmp_path / "processed"
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == 0
    assert split.main(["--params", str(p), "--dataset", "mine", "--raw", str(raw), "--out", str(splits)]) == 0
    assert preprocess.main(["--params", str(p), "--dataset", "mine", "--splits", str(splits), "--out", str(out)]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert [t["name"] for t in meta["tasks"]] == ["type", "quality"]
    assert {t["name"]: t.get("n_classes") for t in meta["tasks"]} == {"type": 2, "quality": 5}
    kinds = {f["name"]: f["kind"] for f in meta["features"]}
    assert "density" not in kinds and kinds["pH"] == "categorical" and kinds["fixed acidity"] == "numerical"
    assert len(kinds) == 10
    declared = meta["declared"]
    assert declared["tasks"][0]["classes"] == ["red", "white"]  # white is the positive class (sorted)
    assert declared["inference"]["reasons"]["pH"] == "categorical: declared"
    assert "whole numbers" in declared["inference"]["reasons"]["free sulfur dioxide"]
    train = pd.read_parquet(out / "train.parquet")
    assert list(train.columns)[-2:] == ["type", "quality"] and "total sulfur dioxide" in train.columns
    assert sum(json.loads((splits / "info.json").read_text())["n_rows"].values()) == 240


def test_a_declared_dataset_s_recipe_is_resolved_for_its_columns(tmp_path: Path) -> None:
    p = _params(tmp_path, {"local": {"path": str(WINE)}, "tasks": {"type": "binary", "quality": "multiclass"},
                           "features": {"drop": ["density"]}})
    params = parse_params(yaml.safe_load(p.read_text()), str(p))
    assert n_features("mine", params) == 10  # 13 columns, 2 tasks, 1 dropped


def test_a_semicolon_csv_with_quoted_names_is_read_as_uci_writes_it(tmp_path: Path) -> None:
    rows = ['"fixed acidity";"pH";"quality"'] + [f"{7 + i / 10};{3 + i / 100};{5 + i % 3}" for i in range(40)]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "data.csv").write_text("\n".join(rows) + "\n")
    p = _params(tmp_path, {"local": {"path": str(tmp_path / "t")}, "tasks": {"quality": "multiclass"}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(tmp_path / "raw")]) == 0
    record = json.loads((tmp_path / "raw" / "schema.json").read_text())
    assert [f["name"] for f in record["features"]] == ["fixed acidity", "pH"]


FRAME = pd.DataFrame({"Age (years)": [30, 41, 52, 63] * 5, "job": ["a", "b", "c", "d"] * 5,
                      "income": ["<=50K", ">50K"] * 10, "spend": ["1.5", "2", "x", "4"] * 5,
                      "marital status": ["single", "married", "widowed", "single"] * 5})

BAD_DATA = {
    "target not in the file": ({"wage": "regression"}, None, "datasets.mine.tasks: column 'wage' is not in"),
    "regression target with strings": ({"spend": "regression"}, None,
                                       "datasets.mine.tasks.spend: regression, but column 'spend' holds text ('x'"),
    "binary task with three values": ({"marital status": "binary"}, None,
                                      "datasets.mine.tasks.marital status: binary, but column 'marital status' "
                                      "holds 3 distinct value(s)"),
    "listed feature not in the file": ({"income": "binary"}, {"numerical": ["age"]},
                                       "datasets.mine.features.numerical: column 'age' is not in"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_a_declaration_that_does_not_fit_the_file_exits_3_naming_key_and_column(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, features, expected = BAD_DATA[case]
    entry: dict[str, Any] = {"local": {"path": _table(tmp_path, FRAME)}, "tasks": tasks}
    if features is not None:
        entry["features"] = features
    p = _params(tmp_path, entry)
    out = tmp_path / "raw"
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(out)]) == BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert expected in err, err
    assert not out.exists()


BAD_PARAMS = {
    "feature listed twice": ({"income": "binary"}, {"categorical": ["job"], "numerical": ["job"]},
                             "datasets.mine: features.numerical: column 'job' is listed twice (also in "
                             "features.categorical)"),
    "target listed as a feature": ({"income": "binary"}, {"categorical": ["income"]},
                                   "datasets.mine: features.categorical: column 'income' is a task"),
}


@pytest.mark.parametrize("case", list(BAD_PARAMS))
def test_a_declaration_that_contradicts_itself_exits_3_naming_key_and_column(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, features, expected = BAD_PARAMS[case]
    p = _params(tmp_path, {"local": {"path": _table(tmp_path, FRAME)}, "tasks": tasks, "features": features})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(tmp_path / "raw")]) == BAD_INPUT
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err, err


def test_an_unknown_dataset_without_tasks_and_a_registry_name_with_tasks_are_refused(tmp_path: Path) -> None:
    entry = {"source": "local", "local": {"path": "x.csv"}, "split": SPLIT}
    with pytest.raises(ConfigError, match=r"'mine' is not a dataset with a schema, nor declared with `tasks:`"):
        parse_params({"datasets": {"mine": entry}})
    with pytest.raises(ConfigError, match=r"datasets.higgs.tasks: higgs has a schema of its own"):
        parse_params({"datasets": {"higgs": {**entry, "tasks": {"y": "binary"}}}})


@pytest.mark.parametrize("model", ["stl_mlp", "maya"])
def test_task_columns_named_as_torch_attributes_or_with_dots_build_a_model(model: str) -> None:
    import torch

    from multitab.datasets.schema import DatasetSchema, Feature, RawColumn, Task
    from multitab.hparams.recipe import recipe
    from multitab.models import build_model

    tasks = (Task("type", "binary", column="type"), Task("score 1.5", "regression", column="score 1.5"))
    schema = DatasetSchema("mine", (RawColumn("x", "float", "feature"),), (Feature("x", "numerical"),), tasks)
    net = build_model(model, schema, recipe(model, 1)[0].model)
    x_num, x_cat = torch.zeros(3, 1), torch.zeros(3, 0, dtype=torch.long)
    if model == "maya":  # it attends to training rows with their labels (a label embedding per task)
        net.fit_context(x_num, x_cat, {"type": torch.tensor([0, 1, 0]), "score 1.5": torch.zeros(3)})
    net.eval()
    out = net(x_num, x_cat)
    assert set(out) == {"type", "score 1.5"}


def test_runs_yaml_lists_declared_datasets_apart_from_the_registry_s(tmp_path: Path) -> None:
    from multitab.runs.stages import data_stages

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())["datasets"]
    raw["mine"] = {"source": "local", "local": {"path": "local/mine"}, "split": SPLIT, "tasks": {"y": "binary"}}
    stages = data_stages(parse_params({"datasets": raw}))
    assert list(stages["schema_datasets"]) == ["aliexpress", "acs_income", "higgs"]
    assert stages["declared_datasets"] == {"mine": {"local": {"path": "local/mine"}}}


def test_a_train_and_a_test_file_keep_their_rows_under_official_test(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    wine = pd.read_csv(WINE / "data.csv")
    folder = tmp_path / "mine"
    folder.mkdir()
    wine.iloc[:200].to_parquet(folder / "train.parquet", index=False)
    wine.iloc[200:].to_csv(folder / "test.csv.gz", index=False)
    entry = {"local": {"path": str(folder)}, "tasks": {"type": "binary", "alcohol": "regression"}}
    p = _params(tmp_path, entry)
    raw, splits = tmp_path / "raw", tmp_path / "splits"
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == BAD_INPUT
    assert "datasets.mine.split.method: shuffle does not fit a test file" in capsys.readouterr().err
    p = _params(tmp_path, {**entry, "split": {"method": "official_test", "seed": 0, "val_fraction": 0.1}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == 0
    assert split.main(["--params", str(p), "--dataset", "mine", "--raw", str(raw), "--out", str(splits)]) == 0
    assert json.loads((splits / "info.json").read_text())["n_rows"] == {"train": 180, "val": 20, "test": 40}
    test = pd.read_parquet(splits / "test.parquet")
    assert test["alcohol"].tolist() == pytest.approx(wine["alcohol"].iloc[200:].tolist())


def test_the_validation_page_shows_what_was_declared_and_inferred(tmp_path: Path) -> None:
    from multitab.validation.report_page import write_declared, write_index

    p = _params(tmp_path, {"local": {"path": str(WINE)}, "tasks": {"type": "binary", "quality": "multiclass"},
                           "features": {"drop": ["density"]}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(tmp_path / "raw")]) == 0
    write_declared(tmp_path / "report", json.loads((tmp_path / "raw" / "schema.json").read_text()))
    page = write_index(tmp_path / "report").read_text()
    assert "Datasets declared in params.yaml: what was inferred" in page
    assert "<td>free sulfur dioxide</td><td>feature</td><td>numerical</td><td>numerical: whole numbers" in page
    assert "<td>type</td><td>task</td><td>binary</td><td>red, white</td>" in page
    assert "<td>density</td><td>dropped</td>" in page


def test_a_validation_file_of_its_own_is_the_val_split_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from multitab.validation.validate import expected_rows

    wine = pd.read_csv(WINE / "data.csv")
    folder = tmp_path / "mine"
    folder.mkdir()
    wine.iloc[:150].to_csv(folder / "train.csv", index=False)
    wine.iloc[150:190].to_parquet(folder / "val.parquet", index=False)
    entry = {"local": {"path": str(folder)}, "tasks": {"type": "binary", "alcohol": "regression"}}
    raw, splits = tmp_path / "raw", tmp_path / "splits"
    p = _params(tmp_path, {**entry, "split": {"method": "official_test", "seed": 0, "val_fraction": 0.1}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == BAD_INPUT
    assert "holds val.parquet but no test.*" in capsys.readouterr().err
    wine.iloc[190:].to_csv(folder / "test.csv", index=False)
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == BAD_INPUT
    err = capsys.readouterr().err
    assert "datasets.mine.split.val_fraction: 0.1, but" in err and "set it to 0" in err, err
    p = _params(tmp_path, {**entry, "split": {"method": "official_test", "seed": 0, "val_fraction": 0.0}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == 0
    assert split.main(["--params", str(p), "--dataset", "mine", "--raw", str(raw), "--out", str(splits)]) == 0
    assert json.loads((splits / "info.json").read_text())["n_rows"] == {"train": 150, "val": 40, "test": 50}
    val = pd.read_parquet(splits / "val.parquet")
    assert val["alcohol"].tolist() == pytest.approx(wine["alcohol"].iloc[150:190].tolist())
    params = parse_params(yaml.safe_load(p.read_text()), str(p))
    from multitab.datasets.declared import stage_schema

    schema = stage_schema("mine", params.dataset("mine"), splits)
    assert schema.raw_files == ("train", "val", "test")
    observed = {"train": 150, "val": 40, "test": 50}
    assert expected_rows(schema, params.dataset("mine"), 2, observed) == dict.fromkeys(observed, (1, None))


def _with_gaps(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    spend = rng.lognormal(3.0, 1.0, n)
    spend[rng.random(n) < 0.2] = np.nan  # empty cells in the CSV
    return pd.DataFrame({"spend": spend, "rate": rng.normal(0.0, 1.0, n), "job": rng.choice(["a", "b", "c"], n),
                         "churn": rng.choice(["no", "yes"], n)})


def test_missing_numerical_values_are_filled_with_the_train_median_and_every_row_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from multitab.config import load_params
    from multitab.datasets.declared import stage_schema
    from multitab.validation.suites import raw_suite

    frame = _with_gaps()
    entry = {"local": {"path": _table(tmp_path, frame)}, "tasks": {"churn": "binary"}}
    raw, splits, out = tmp_path / "raw", tmp_path / "splits", tmp_path / "processed"
    p = _params(tmp_path, {**entry, "features": {"missing": "refuse"}})
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == BAD_INPUT
    first = int(np.flatnonzero(frame["spend"].isna().to_numpy())[0])
    assert (f"datasets.mine.features.missing: refuse, but numerical column 'spend' has no value at row {first + 1}"
            in capsys.readouterr().err)
    p = _params(tmp_path, entry)  # missing: median, the default
    assert acquire.main(["--params", str(p), "--dataset", "mine", "--out", str(raw)]) == 0
    assert split.main(["--params", str(p), "--dataset", "mine", "--raw", str(raw), "--out", str(splits)]) == 0
    schema = stage_schema("mine", parse_params(yaml.safe_load(p.read_text()), str(p)).dataset("mine"), splits)
    suite = raw_suite(schema, "train", load_params(ROOT_PARAMS).validation.raw, rows=(1, None), n_rows=140)
    checks = {(e.meta["check"], e.meta["column"]) for e in suite}
    assert ("not_null", "rate") in checks and ("not_null", "spend") not in checks  # the gaps pass validate_raw
    assert preprocess.main(["--params", str(p), "--dataset", "mine", "--splits", str(splits), "--out", str(out)]) == 0
    meta = json.loads((out / "meta.json").read_text())
    train_raw = pd.read_parquet(splits / "train.parquet")["spend"]
    fill = meta["imputed"]["columns"]["spend"]
    assert fill["value"] == pytest.approx(float(np.nanmedian(train_raw.astype(np.float64))))
    assert sum(fill["missing"].values()) == frame["spend"].isna().sum() and "rate" not in meta["imputed"]["columns"]
    processed = {k: pd.read_parquet(out / f"{k}.parquet") for k in ("train", "val", "test")}
    assert sum(len(f) for f in processed.values()) == len(frame)
    assert not any(f["spend"].isna().any() for f in processed.values())

    # test rows far from train's (and more of them missing) do not move the fill nor the training features
    test = pd.read_parquet(splits / "test.parquet")
    test["spend"] = np.where(np.arange(len(test)) % 2 == 0, np.nan, 1e6).astype(np.float32)
    test.to_parquet(splits / "test.parquet", index=False)
    out2 = tmp_path / "processed2"
    assert preprocess.main(["--params", str(p), "--dataset", "mine", "--splits", str(splits), "--out", str(out2)]) == 0
    assert json.loads((out2 / "meta.json").read_text())["imputed"]["columns"]["spend"]["value"] == fill["value"]
    pd.testing.assert_frame_equal(pd.read_parquet(out2 / "train.parquet"), processed["train"])


def test_a_task_named_with_slashes_or_dots_keeps_its_curves_in_its_run_s_folder(tmp_path: Path) -> None:
    from stages.train import write_dvclive

    # a declared dataset's task names are its file's column names: `income/month`, or one climbing out of the folder
    history = [{"epoch": 1, "train_loss_income/month": 0.5, "val_income/month": 0.7, "val_x/../../../../out": 0.1,
                "val_'vote'": 0.6}, {"epoch": 2, "train_loss_income/month": 0.4, "val_income/month": 0.8,
                                     "val_x/../../../../out": 0.2, "val_'vote'": 0.65}]
    write_dvclive(history, tmp_path / "run" / "dvclive")
    metrics = tmp_path / "run" / "dvclive" / "plots" / "metrics"
    written = sorted(tmp_path.rglob("*.tsv"))
    assert [p.parent for p in written] == [metrics] * 4, written
    assert sorted(p.name for p in written) == sorted(["train_loss_income\u2215month.tsv", "val_income\u2215month.tsv",
                                                      "val_x\u2215..\u2215..\u2215..\u2215..\u2215out.tsv",
                                                      "val_'vote'.tsv"])
    curve = pd.read_csv(metrics / "val_income\u2215month.tsv", sep="\t")
    assert curve.iloc[:, -1].tolist() == pytest.approx([0.7, 0.8])


# -------------------------------------------------------------------- the reader: the paper datasets' one


QUIRKS = ['id,spaced,signed,under,exp,flag,flag_na,int_na,huge,mixed,zeros,empty,text,comma,uint,spellings,quoted',
          '1, 5,+5,1_000,1e5,True,True,1,99999999999999999999,1,007,,a,"1,5",18446744073709551615,NA,""',
          '2,6 ,6,2,2,false,,,1,x,8,,b ,2,1,#N/A,"q"',
          '3,7,7,3,3,TRUE,False,3,2,2,9,, c,3,2,n/a,"r"',
          '4,8,8,4,4,true,True,4,3,3,10,,"two\nlines",4,3,<NA>,s']


def test_a_declared_file_is_read_as_pandas_reads_a_good_one(tmp_path: Path) -> None:
    """The file goes through the paper datasets' reader (text cells), yet the frame is read_csv's: its numbers
    (" 5", "+5", 1e5, missing cells making a column float, integers beyond int64), true/false values, text (a
    quoted line end in it), and every spelling of a missing value pandas knows; a Parquet file's frame is
    read_parquet's."""
    from multitab.datasets.sources.table import PANDAS_NULLS, read_table

    assert set(PANDAS_NULLS) == set(pd._libs.parsers.STR_NA_VALUES)
    csv = tmp_path / "quirks.csv"
    csv.write_text("\n".join(QUIRKS) + "\n")
    pd.testing.assert_frame_equal(read_table(csv), pd.read_csv(csv, low_memory=False))
    pd.testing.assert_frame_equal(read_table(WINE / "data.csv"), pd.read_csv(WINE / "data.csv", low_memory=False))
    frame = pd.read_csv(WINE / "data.csv")
    frame = frame.assign(kind=frame["type"].astype("category"), good=frame.quality > 5)
    frame.to_parquet(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(read_table(tmp_path / "t.parquet"), pd.read_parquet(tmp_path / "t.parquet"))


def test_a_bad_header_stops_the_run_matrix_naming_the_file(tmp_path: Path) -> None:
    """The header read for a declared dataset's recipe (its number of features) goes through the same reader."""
    (tmp_path / "t").mkdir()
    data = tmp_path / "t" / "data.csv"
    data.write_bytes((WINE / "data.csv").read_bytes().replace(b"pH", b"p\xc9", 1))  # a latin-1 header
    p = _params(tmp_path, {"local": {"path": str(tmp_path / "t")}, "tasks": {"quality": "multiclass"}})
    params = parse_params(yaml.safe_load(p.read_text()), str(p))
    with pytest.raises(ConfigError, match=rf"{data} line 1: byte b'\\xc9' at position \d+ is not UTF-8 text"):
        n_features("mine", params)


def test_a_nested_parquet_column_is_refused_naming_it_and_read_once_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pd.read_csv(WINE / "data.csv")
    table = pa.Table.from_pandas(frame, preserve_index=False).append_column("tags", pa.array([["a", "b"]] * len(frame)))
    pq.write_table(table, tmp_path / "wine.parquet")
    entry: dict[str, Any] = {"local": {"path": str(tmp_path / "wine.parquet")}, "tasks": {"quality": "multiclass"}}
    args = ["--params", str(_params(tmp_path, entry)), "--dataset", "mine", "--out", str(tmp_path / "raw")]
    assert acquire.main(args) == BAD_INPUT
    err = capsys.readouterr().err
    assert f"{tmp_path / 'wine.parquet'}: column 'tags' has type list<element: string>, a nested type" in err, err
    assert err.rstrip().endswith("or list it in datasets.mine.features.drop") and err.count("\n") == 1, err
    args[1] = str(_params(tmp_path, {**entry, "features": {"drop": ["tags"]}}))
    assert acquire.main(args) == 0
    assert "tags" not in [f["name"] for f in json.loads((tmp_path / "raw" / "schema.json").read_text())["features"]]
