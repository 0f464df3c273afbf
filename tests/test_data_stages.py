"""The data stage scripts end to end, and the real `dvc repro` on a reduced params file."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from _toy_dvc import run_dvc  # tests/ is on sys.path (pytest's default import mode)
from multitab.config import parse_params
from multitab.runs.stages import data_stages as iterated
from multitab.runtime.exit_codes import BAD_INPUT
from stages import acquire, preprocess, split

ROOT = Path(__file__).resolve().parents[1]


def small_params(tmp_path: Path, rows: int = 600) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for ds in params["datasets"].values():
        ds["standin"]["rows"] = {k: (rows if k != "test" else rows // 2) for k in ds["standin"]["rows"]}
        ds["preprocess"]["max_quantiles"] = 50
    if "aliexpress" in params["datasets"]:
        params["datasets"]["aliexpress"]["standin"]["rows"] = {"train": 4000, "test": 1000}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def run_data_stages(name: str, params: Path, root: Path) -> None:
    assert acquire.main(["--params", str(params), "--dataset", name, "--out", str(root / "raw" / name)]) == 0
    assert (
        split.main(["--params", str(params), "--dataset", name, "--raw", str(root / "raw" / name),
                    "--out", str(root / "splits" / name)]) == 0
    )
    assert (
        preprocess.main(["--params", str(params), "--dataset", name, "--splits", str(root / "splits" / name),
                         "--out", str(root / "processed" / name)]) == 0
    )


@pytest.mark.parametrize("name", ["aliexpress", "acs_income", "higgs"])
def test_stage_mains_end_to_end(name: str, tmp_path: Path) -> None:
    params = small_params(tmp_path)
    run_data_stages(name, params, tmp_path)
    out = tmp_path / "processed" / name
    meta = json.loads((out / "meta.json").read_text())
    assert meta["standin"] is True and meta["dataset"] == name
    for k in ("train", "val", "test"):
        df = pd.read_parquet(out / f"{k}.parquet")
        assert len(df) == meta["n_rows"][k] > 0
        assert list(df.columns) == [f["name"] for f in meta["features"]] + [t["name"] for t in meta["tasks"]]
    assert set(meta["inputs"]) == {"train.parquet", "val.parquet", "test.parquet"}


def test_failed_stage_keeps_previous_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = small_params(tmp_path)
    run_data_stages("higgs", params, tmp_path)
    processed = tmp_path / "processed" / "higgs"
    before = {p.name: p.read_bytes() for p in processed.iterdir()}
    # Corrupt a split: the stage must fail with a clear error and leave the processed folder as it was.
    (tmp_path / "splits" / "higgs" / "train.parquet").write_bytes(b"not parquet")
    rc = preprocess.main(["--params", str(params), "--dataset", "higgs", "--splits",
                          str(tmp_path / "splits" / "higgs"), "--out", str(processed)])
    assert rc == BAD_INPUT
    assert "[preprocess@higgs] error" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in processed.iterdir()} == before
    assert not [p for p in processed.parent.iterdir() if p.name.startswith(".")], "temporary folder left"


def test_unknown_param_key_fails_the_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = yaml.safe_load(small_params(tmp_path).read_text())
    params["datasets"]["higgs"]["split"]["val_fractoin"] = 0.1
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(params))
    assert acquire.main(["--params", str(p), "--dataset", "higgs", "--out", str(tmp_path / "raw")]) == BAD_INPUT
    err = capsys.readouterr().err
    assert "bad.yaml: datasets.higgs.split.val_fractoin: unknown key; known: [" in err
    assert not (tmp_path / "raw").exists()


@pytest.mark.slow  # ~50-100 s; the data stages run in-process in this file; through DVC under -m slow and in make repro
def test_dvc_repro_data_stages_then_nothing_to_do(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for item in ("stages", "src", "gx", "local"):  # local/<D>/: the default local source path (a DVC dep)
        shutil.copytree(ROOT / item, repo / item)
    # The data stages of the real dvc.yaml, as written there.
    dvcyaml = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    data_stages = {k: v for k, v in dvcyaml["stages"].items()
                   if k in ("acquire", "split", "validate_raw", "preprocess")}
    params = yaml.safe_load(small_params(tmp_path, rows=400).read_text())
    lists = iterated(parse_params({"datasets": params["datasets"]}))  # runs.yaml's, inline (multitab.runs.stages)
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"vars": [lists], "stages": data_stages}, sort_keys=False))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    run_dvc(["init", "-q"], repo)
    # Two datasets' branches (AliExpress' stand-in needs ~40k rows for a positive of its 0.07 % task in
    # every split; its data stages run in test_real_layouts' and test_datasets' direct calls).
    targets = [f"preprocess@{d}" for d in ("acs_income", "higgs")]
    first = run_dvc(["repro", *targets], repo)
    assert "Running stage 'preprocess@higgs'" in first
    second = run_dvc(["repro", *targets], repo)
    assert "Running stage" not in second
    # Changing one dataset's parameter re-runs only that dataset's branch.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"]["higgs"]["preprocess"]["numerical"] = "standard"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = run_dvc(["repro", *targets], repo)
    assert "Running stage 'preprocess@higgs'" in third
    assert "Running stage" not in third.replace("Running stage 'preprocess@higgs'", "")
    status = run_dvc(["status", *targets], repo)
    assert "changed" not in status
    # protocol authors_code: the Higgs split becomes their stratified random one; the DAG completes
    ordered_val = pd.read_parquet(repo / "data" / "splits" / "higgs" / "val.parquet")
    params["protocol"] = "authors_code"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    fourth = run_dvc(["repro", *targets], repo)
    assert "Running stage 'split@higgs'" in fourth and "Running stage 'preprocess@higgs'" in fourth
    stratified_val = pd.read_parquet(repo / "data" / "splits" / "higgs" / "val.parquet")
    assert len(stratified_val) == len(ordered_val) and not stratified_val.equals(ordered_val)
    assert "changed" not in run_dvc(["status", *targets], repo)


# ------------------------------------------------------------------------------------------------ debris
# What a stage killed with SIGKILL leaves (no handler runs: its temporary output folder and the scratch inside it)
# goes at the stage's next run, whatever its name.

_KILLED_IN = """
import importlib, os, signal, sys
module, name, stage = sys.argv[1:4]
setattr(importlib.import_module(module), name, lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
importlib.import_module("stages." + stage).main(sys.argv[4:])
"""
KILL_POINTS = {  # stage: where its scratch exists (an archive's members extracted; columns parked)
    "acquire": ("multitab.datasets.sources", "_write_all"),
    "split": ("multitab.datasets.steps", "write_parquet_columns"),
    "preprocess": ("multitab.datasets.preprocess_columns", "write_parquet_columns"),
}


@pytest.mark.parametrize("stage", list(KILL_POINTS))
def test_a_stage_killed_with_sigkill_leaves_nothing_after_its_next_run(stage: str, tmp_path: Path) -> None:
    import sys
    import zipfile

    archive = tmp_path / "AliExpress_NL.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("train", "test"):
            z.write(ROOT / "tests" / "fixtures" / "aliexpress_nl" / f"{name}.csv", f"AliExpress_NL/{name}.csv")
    params = yaml.safe_load(small_params(tmp_path).read_text())
    if stage == "acquire":
        params["datasets"]["aliexpress"].update(source="local", local={"path": str(archive)})
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(params, sort_keys=False))
    args = {"acquire": ["--out", str(tmp_path / "raw" / "aliexpress")],
            "split": ["--raw", str(tmp_path / "raw" / "aliexpress"),
                      "--out", str(tmp_path / "splits" / "aliexpress")],
            "preprocess": ["--splits", str(tmp_path / "splits" / "aliexpress"),
                           "--out", str(tmp_path / "processed" / "aliexpress")]}
    mains = {"acquire": acquire.main, "split": split.main, "preprocess": preprocess.main}
    for before in list(KILL_POINTS)[: list(KILL_POINTS).index(stage)]:
        assert mains[before](["--params", str(p), "--dataset", "aliexpress", *args[before]]) == 0
    folder = Path(args[stage][-1]).parent
    killed = subprocess.run([sys.executable, "-c", _KILLED_IN, *KILL_POINTS[stage], stage, "--params", str(p),
                             "--dataset", "aliexpress", *args[stage]], cwd=ROOT, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = [q.name for q in folder.iterdir()]
    assert left and all(name.startswith(".") for name in left)  # its temporary output, with the scratch in it
    assert mains[stage](["--params", str(p), "--dataset", "aliexpress", *args[stage]]) == 0
    assert [q.name for q in folder.iterdir()] == ["aliexpress"]
