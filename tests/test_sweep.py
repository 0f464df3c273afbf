"""Hyperparameter sweeps: the grids in params, a grid point's configuration, the selection and its tie
rule, the report, and (end to end) a 2 x 2 sweep through the real dvc.yaml stages and the Prefect flow,
killed after its first point and resumed."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from _toy_dvc import repo_dvc_yaml
from _training_tiny import write_tiny_hparams, write_tiny_processed
from multitab.config import ConfigError, load_params, parse_params
from multitab.config.runs import PAPER_GRIDS
from multitab.evaluation.sweep import Point, Sweep, SweepError, collect
from multitab.evaluation.sweep_report import write_sweep_outputs
from multitab.hparams import apply_protocol, load, protocol_overlay, read
from multitab.models import build_model
from multitab.runs.expand import expand
from multitab.runs.locate import data_names
from multitab.runs.profiles import plain
from multitab.runs.types import point_id

ROOT = Path(__file__).resolve().parents[1]
BENCH = {"name": "p06_pd3_t3", "features": [{"name": f"x{i:02d}", "kind": "numerical", "cardinality": None}
                                          for i in range(4)],
         "tasks": [{"name": "y1", "type": "regression", "n_classes": None}]}


def raw_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_repo_params_sweep_groups_write_out_the_papers_grids() -> None:
    params = load_params(ROOT / "params.yaml")
    sweeps = {name: g for name, g in params.runs.items() if g.sweep is not None}
    assert {g.sweep for g in sweeps.values()} == {"mlp", "inter_sample"}
    for name, group in sweeps.items():
        assert group.sweep is not None and group.grid == PAPER_GRIDS[group.sweep], name
        assert group.opt_in and group.out == "results/sweep_runs", name
    assert params.train.hparams == "authors"  # the default replays the authors'


@pytest.mark.parametrize("change, message", [
    (lambda g: g["grid"].pop("dropout"),
     r"runs.sweep_mlp: grid: axes must be \['lr', 'dropout'\] \(family mlp\), got \['lr'\]"),
    (lambda g: g.update(models=["multitab_net"]), r"runs.sweep_mlp: models: \['multitab_net'\] cannot be swept"),
    (lambda g: g["grid"].update(lr=[]), r"runs.sweep_mlp: grid.lr: expected a non-empty list"),
    (lambda g: g.pop("sweep"), r"runs.sweep_mlp: sweep and grid go together"),
    (lambda g: g["train"].update(max_epochs=0), r"runs.sweep_mlp.train: .*max_epochs=0 must be >= 1"),
])
def test_bad_sweep_group_fails_at_load_naming_the_key(change, message) -> None:
    raw = raw_params()
    raw["runs"]["sweep_mlp"]["train"] = dict(raw["runs"]["sweep_mlp"]["train"])
    change(raw["runs"]["sweep_mlp"])
    with pytest.raises(ConfigError, match=message):
        from multitab.runs.profiles import group_train
        group_train(parse_params(raw), "sweep_mlp")


def test_a_sweep_group_expands_to_one_run_per_point_with_the_point_as_its_folder() -> None:
    params = load_params(ROOT / "params.yaml")
    runs = [r for r in expand(params).values() if r.group == "sweep_inter_sample"]
    assert len(runs) == 4 * 4 * 4 * 2
    first = runs[0]
    assert first.point == {"lr": 0.0001, "att_dropout": 0.0, "ff_dropout": 0.0, "rope": False}
    assert first.key == "sweep_inter_sample-p06_pd3_t3-multitab_net-lr0_0001-att_dropout0_0-ff_dropout0_0-ropefalse-0"
    assert first.out == ("results/sweep_runs/p06_pd3_t3/multitab_net/"
                         "lr0.0001-att_dropout0.0-ff_dropout0.0-ropefalse/seed0")
    assert first.data == "data/synthetic/p06_pd3_t3" and first.opt_in


def test_a_grid_point_is_the_authors_file_with_its_coordinates_put_in() -> None:
    authors = load("multitab_bench", "multitab_net", protocol="authors_code", root=ROOT)
    assert authors.model["inter_sample"] == "per_sample_mixing"  # their `rope: true`
    point = authors.with_point({"lr": 0.01, "att_dropout": 0.2, "ff_dropout": 0.1, "rope": False})
    assert authors.optim is not None and authors.optim["lr"] == 0.001  # the file's values are not changed
    kw = apply_protocol(point, "multitab_net", protocol_overlay(ROOT, "paper")).model
    assert (kw["attention_dropout"], kw["ffn_dropout"], kw["inter_sample"]) == (0.2, 0.1, "attention")
    assert point.optim is not None and point.optim["lr"] == 0.01 and point.point == {
        "lr": 0.01, "att_dropout": 0.2, "ff_dropout": 0.1, "rope": False}
    rope = apply_protocol(authors.with_point({"rope": True}), "multitab_net", protocol_overlay(ROOT, "paper"))
    assert rope.model["inter_sample"] == "rope_attention"  # their rope, the paper's reading of it
    mmoe = load("multitab_bench", "mmoe", protocol="authors_code", root=ROOT).with_point({"lr": 0.1, "dropout": 0.3})
    assert mmoe.model["dropout"] == 0.3 and mmoe.optim is not None and mmoe.optim["lr"] == 0.1
    build_model("mmoe", BENCH, mmoe.model)  # the keywords are the model's
    xgb = load("higgs", "xgboost", root=ROOT).with_point({"max_depth": 4, "learning_rate": 0.05, "n_rounds": 50})
    assert {k: xgb.model[k] for k in ("max_depth", "learning_rate", "binary_learning_rate", "n_rounds")} == {
        "max_depth": 4, "learning_rate": 0.05, "binary_learning_rate": 0.05, "n_rounds": 50}
    with pytest.raises(ValueError, match="sets optim.lr, and the file has no optim"):
        load("higgs", "xgboost", root=ROOT).with_point({"lr": 0.1})
    with pytest.raises(ValueError, match=r"unknown axis \['momentum'\]"):
        authors.with_point({"momentum": 0.9})


def _sweep(vals: list[float | None]) -> Sweep:
    grid = {"lr": (0.001, 0.01), "dropout": (0.0, 0.1)}
    coords = [{"lr": a, "dropout": b} for a in grid["lr"] for b in grid["dropout"]]
    points = [Point(coords=c, order=i, records={0: {"val_mean": v, "test_mean": v, "train_seconds": 1.0,
                                                      "best_epoch": 1, "epochs": 2}})
              for i, (c, v) in enumerate(zip(coords, vals))]
    return Sweep("p06_pd3_t3", "mmoe", "mlp", grid, (0,), points, load("multitab_bench", "mmoe", root=ROOT))


def test_selection_takes_the_highest_mean_and_breaks_ties_by_grid_order() -> None:
    assert _sweep([0.5, 0.7, 0.6, 0.1]).selected.coords == {"lr": 0.001, "dropout": 0.1}
    # equal to 6 decimals: a tie, won by the earlier point (lower lr) even when it is lower in the 8th
    assert _sweep([0.1, 0.2, 0.8000000, 0.80000004]).selected.coords == {"lr": 0.01, "dropout": 0.0}
    assert _sweep([0.1, 0.2, 0.79999996, 0.8000000]).selected.coords == {"lr": 0.01, "dropout": 0.0}
    assert _sweep([0.1, 0.2, 0.800001, 0.800002]).selected.coords == {"lr": 0.01, "dropout": 0.1}
    # an undefined validation metric (a diverged run) ranks last
    ranked = _sweep([None, 0.2, 0.3, 0.1]).ranked()
    assert ranked[-1].coords == {"lr": 0.001, "dropout": 0.0}


def test_mean_over_seeds_decides() -> None:
    s = _sweep([0.5, 0.6, 0.1, 0.1])
    s.points[0].records[1] = {**s.points[0].records[0], "val_mean": 0.9}  # mean 0.7
    s.points[1].records[1] = {**s.points[1].records[0], "val_mean": 0.6}  # mean 0.6
    for p in s.points[2:]:
        p.records[1] = dict(p.records[0])
    assert s.selected.coords == {"lr": 0.001, "dropout": 0.0}
    assert round(s.points[0].val_std or 0, 4) == round(((0.2 ** 2) * 2) ** 0.5, 4)


def _write_point(root: Path, dataset: str, model: str, coords: dict, seed: int, val: float) -> None:
    path = root / dataset / model / point_id(coords) / f"seed{seed}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.json").write_text(json.dumps({
        "val_mean": val, "test_mean": val - 0.01, "train_seconds": 2.0, "best_epoch": 2, "epochs": 3,
        "hparams": {"source": "grid point", "point": coords}}))


def _small_sweep_params(tmp_path: Path) -> tuple[Path, dict]:
    raw = raw_params()
    del raw["runs"]["sweep_inter_sample"]
    raw["runs"]["sweep_mlp"].update(models=["mmoe"], grid={"lr": [0.001, 0.01], "dropout": [0.0, 0.1]},
                                    data={"bench": ["p06_pd3_t3"]})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def test_collect_names_a_missing_point_and_a_point_of_another_grid(tmp_path: Path) -> None:
    path, _ = _small_sweep_params(tmp_path)
    params = load_params(path)
    sweep = {"sweep_mlp": params.group("sweep_mlp")}
    kinds = data_names(params)
    runs = tmp_path / "runs"
    coords = [{"lr": a, "dropout": b} for a in (0.001, 0.01) for b in (0.0, 0.1)]
    for c in coords[:3]:
        _write_point(runs, "p06_pd3_t3", "mmoe", c, 0, 0.5)
    with pytest.raises(SweepError, match=r"lr0.01-dropout0.1/seed0/metrics.json: grid point not trained"):
        collect(runs, sweep, kinds, ROOT)
    _write_point(runs, "p06_pd3_t3", "mmoe", {"lr": 0.01, "dropout": 0.2}, 0, 0.9)  # another grid's leftover
    shutil.copytree(runs / "p06_pd3_t3/mmoe/lr0.01-dropout0.2", runs / "p06_pd3_t3/mmoe/lr0.01-dropout0.1")
    with pytest.raises(SweepError, match=r"holds grid point \{'lr': 0.01, 'dropout': 0.2\}"):
        collect(runs, sweep, kinds, ROOT)
    _write_point(runs, "p06_pd3_t3", "mmoe", coords[3], 0, 0.7)
    sweeps = collect(runs, sweep, kinds, ROOT)  # the leftover folder lr0.01-dropout0.2 is ignored
    assert [len(s.points) for s in sweeps] == [4] and sweeps[0].selected.coords == coords[3]


def test_outputs_selection_as_hparams_files_report_and_figure(tmp_path: Path) -> None:
    path, _ = _small_sweep_params(tmp_path)
    params = load_params(path)
    sweep, kinds = {"sweep_mlp": params.group("sweep_mlp")}, data_names(params)
    runs = tmp_path / "runs"
    for c, v in zip([{"lr": a, "dropout": b} for a in (0.001, 0.01) for b in (0.0, 0.1)], [0.4, 0.5, 0.8, 0.6]):
        _write_point(runs, "p06_pd3_t3", "mmoe", c, 0, v)
    out = tmp_path / "sweeps"
    swept = tmp_path / "hparams" / "swept"
    summary = write_sweep_outputs(collect(runs, sweep, kinds, ROOT), selected_path=swept, out=out, protocol="paper")
    assert summary["p06_pd3_t3"]["mmoe"]["point"] == "lr0.01-dropout0.0"
    assert [p.relative_to(swept).as_posix() for p in swept.rglob("*.yaml")] == ["p06_pd3_t3/mmoe.yaml"]
    entry = yaml.safe_load((swept / "p06_pd3_t3" / "mmoe.yaml").read_text())
    authors = load("multitab_bench", "mmoe", protocol="authors_code", root=ROOT)
    assert authors.optim is not None
    # the authors' file with the point put in; the rest untouched
    assert {**entry["model"], "dropout": authors.model["dropout"]} == plain(authors.model)
    assert (entry["optim"]["lr"], entry["model"]["dropout"]) == (0.01, 0.0)
    assert entry["optim"]["optimizer"] == authors.optim["optimizer"]
    assert entry["selected_by"]["value"] == 0.8 and entry["selected_by"]["seeds"] == [0]
    assert entry["selected_by"]["started_from"] == "hparams/authors/multitab_bench/mmoe.yaml"
    # the training path reads it as it reads the authors'
    again = read(swept / "p06_pd3_t3" / "mmoe.yaml")
    assert again.model["dropout"] == 0.0 and again.optim is not None and again.optim["lr"] == 0.01
    report = (out / "report.md").read_text()
    assert "**Selected**: lr0.01-dropout0.0: validation 0.8000" in report
    assert "| 1 | lr0.01-dropout0.0 **(selected)** | 0.8000 |" in report
    a_lr, a_do = authors.optim["lr"], authors.model["dropout"]
    assert f"The authors' selection (hparams/authors/multitab_bench/mmoe.yaml): lr{a_lr}-dropout{a_do}" in report
    assert (out / "figures" / "p06_pd3_t3-mmoe.png").stat().st_size > 1000
    rows = (out / "points.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[1].startswith("p06_pd3_t3,mmoe,1,True,0.01,0.0,")


# ------------------------------------------------------------------------------------------ end to end

def _toy_project(root: Path) -> Path:
    """A git + DVC project holding the repo's own stages train and sweep_select (dvc.yaml, as written
    there), its stage scripts and library, params with a run group `real` (STL on a tiny stand-in,
    `train.hparams: swept`) and a sweep group with a 2 x 1 grid of STL on it (two points: one recorded
    before the kill, one after)."""
    root.mkdir()
    for folder in ("stages", "src/multitab"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(["train", "sweep_select"]), sort_keys=False))
    write_tiny_hparams(root, ["stl_mlp"])  # the authors' MultiTab-Bench example's file, as hparams/authors/tiny/
    raw = raw_params()
    sweep_mlp = copy.deepcopy(raw["runs"]["sweep_mlp"])
    sweep_mlp.update(models=["stl_mlp"], grid={"lr": [0.001, 0.1], "dropout": [0.2]}, data={"datasets": ["tiny"]},
                     train={"max_epochs": 3})
    params = {
        "protocol": "paper",
        "train": {**raw["train"], "max_epochs": 2, "max_train_rows": None, "batch_size": 64, "progress": False,
                  "hparams": "swept"},
        "runs": {"real": {"data": {"datasets": ["tiny"]}, "models": ["stl_mlp"], "seeds": [0], "train": {}},
                 "sweep_mlp": sweep_mlp},
        "orchestration": {**raw["orchestration"], "workers": 1, "retries": 0,
                          "summary": "results/pipeline_summary.json"},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    tasks = [{"name": "y1", "type": "regression", "n_classes": None},
             {"name": "y2", "type": "binary", "n_classes": None}]
    write_tiny_processed(root / "data" / "processed" / "tiny", n={"train": 300, "val": 100, "test": 100}, tasks=tasks)
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / "tiny.json").write_text(json.dumps({"success": True}))
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True, env=env)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=root,
                   check=True, env=env)
    return root


def _flow(root: Path, home: Path, *groups: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "false", "PYTHONUNBUFFERED": "1",
           "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(root), str(ROOT / "src"), str(ROOT)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.Popen([sys.executable, "-m", "flows.pipeline", "--root", str(root),
                             *(["--groups", *groups] if groups else [])], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _locked_points(root: Path) -> set[str]:
    try:
        lock = yaml.safe_load((root / "dvc.lock").read_text()) or {}
    except (FileNotFoundError, yaml.YAMLError):  # not written yet, or being rewritten
        return set()
    return {s for s in lock.get("stages", {}) if s.startswith("train@sweep_mlp-")}


# ~50-100 s; tests/test_training_resume.py and the pipeline's stop-and-resume tests cover a killed run resuming
@pytest.mark.slow
def test_sweep_killed_after_its_first_point_resumes_without_retraining_it(tmp_path: Path) -> None:
    root = _toy_project(tmp_path / "p")
    home = tmp_path / "prefect"
    # `make sweep` (--groups sweep_mlp): the grid points and the selection. The default run reads the selection
    # (train.hparams: swept), which does not exist yet: that expansion leaves it out, and the expansion after the
    # sweep reads it. Killed (the flow and its DVC subprocess) once a point is recorded.
    proc = _flow(root, home, "sweep_mlp")
    deadline = time.monotonic() + 240
    while not _locked_points(root):
        assert proc.poll() is None, ("the flow ended before any grid point was recorded:\n"
                                     f"{proc.stdout.read() if proc.stdout else ''}")
        assert time.monotonic() < deadline, "no grid point recorded in 240 s"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _locked_points(root)
    assert len(first) < 2 and not (root / "hparams" / "swept").exists()
    assert "train@real-tiny-stl_mlp-0" not in (root / "runs.yaml").read_text()
    points = root / "results" / "sweep_runs" / "tiny" / "stl_mlp"
    done = {}
    for stage in first:  # train@sweep_mlp-tiny-stl_mlp-lr<lr>-dropout<dropout>-<seed>, dots as underscores
        point = "-".join(stage.split("-")[3:5]).replace("_", ".")
        done[point] = (points / point / "seed0" / "metrics.json").read_bytes()

    proc = _flow(root, home, "sweep_mlp")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    stages = summary["stages"]
    # the points recorded before the kill were not trained again; the others ran, then the selection
    assert {s for s in first if stages[s]["status"] == "up_to_date" or s not in stages} == first
    assert {s for s in stages if s.startswith("train@sweep_mlp-") and stages[s]["status"] == "ran"} == (
        {s for s in stages if s.startswith("train@sweep_mlp-")} - first)
    assert stages["sweep_select@sweeps"]["status"] == "ran" and "train@real-tiny-stl_mlp-0" not in stages
    for name, data in done.items():
        assert (points / name / "seed0" / "metrics.json").read_bytes() == data, f"{name} was trained again"
    report = (root / "results" / "sweeps" / "report.md").read_text()
    assert "## stl_mlp on tiny" in report and report.count("| lr") == 2
    assert (root / "results" / "sweeps" / "figures" / "tiny-stl_mlp.png").exists()

    # `make repro`: the expansion reads the selection into the default run's record, which trains with it
    proc = _flow(root, home)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    stages = json.loads((root / "results" / "pipeline_summary.json").read_text())["stages"]
    assert stages["train@real-tiny-stl_mlp-0"]["status"] == "ran"
    chosen = yaml.safe_load((root / "hparams" / "swept" / "tiny" / "stl_mlp.yaml").read_text())
    run = json.loads((root / "results" / "runs" / "tiny" / "stl_mlp" / "seed0" / "metrics.json").read_text())
    assert run["hparams"]["source"] == "swept" and run["hparams"]["file"] == "hparams/swept/tiny/stl_mlp.yaml"
    assert run["optimizer"]["lr"] == chosen["optim"]["lr"] == chosen["selected_by"]["point"]["lr"]
    assert run["hparams"]["model"]["dropout"] == chosen["selected_by"]["point"]["dropout"]


def test_the_train_stage_takes_everything_from_its_run_entry() -> None:
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["train"]
    assert stage["foreach"] == "${train_runs}" and stage["do"]["cmd"] == "python -m stages.train --run ${key}"
    assert "${item.hparams_file}" in stage["do"]["deps"]
    assert stage["do"]["params"] == [{"runs.yaml": ["train_runs.${key}.hparams", "train_runs.${key}.train",
                                                    "train_runs.${key}.params"]}]
    assert point_id({"lr": 0.0001, "rope": True}) == "lr0.0001-ropetrue"
    assert yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["sweep_select"]["foreach"] == "${sweep_selections}"
