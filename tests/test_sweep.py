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

from _training_tiny import write_tiny_processed
from multitab.config import ConfigError, load_params, parse_params
from multitab.config.sweep import PAPER_GRIDS
from multitab.evaluation.sweep import Point, Sweep, SweepError, collect, point_id, write_sweep_outputs
from multitab.models import build_model
from multitab.models.defaults import apply_point, model_defaults, selected_entry, training_defaults
from stages.train import parse_point

ROOT = Path(__file__).resolve().parents[1]
BENCH = {"name": "p06_pd3_t3", "features": [{"name": f"x{i:02d}", "kind": "numerical", "cardinality": None}
                                          for i in range(4)],
         "tasks": [{"name": "y1", "type": "regression", "n_classes": None}]}


def raw_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_repo_params_write_out_the_papers_grids() -> None:
    sweep = load_params(ROOT / "params.yaml").sweep
    for family, grid in PAPER_GRIDS.items():
        assert sweep.family(family).grid == grid, family
    assert load_params(ROOT / "params.yaml").train.hparams == "authors"  # the default replays the authors'


@pytest.mark.parametrize("change, message", [
    (lambda s: s["mlp"]["grid"].pop("dropout"), r"sweep.mlp.grid: axes must be \['lr', 'dropout'\], got \['lr'\]"),
    (lambda s: s["mlp"].update(models=["multitab_net"]), r"sweep.mlp.models: \['multitab_net'\] cannot be swept"),
    (lambda s: s["mlp"]["grid"].update(lr=[]), r"sweep.mlp.grid.lr: expected a non-empty list"),
    (lambda s: s["train"].update(hparams="swept"), r"sweep.train.hparams: set train.hparams instead"),
])
def test_bad_sweep_section_fails_at_load_naming_the_key(change, message) -> None:
    raw = raw_params()
    change(raw["sweep"])
    with pytest.raises(ConfigError, match=message):
        parse_params(raw)


def test_parse_point_reads_numbers_and_booleans() -> None:
    assert parse_point(["lr=0.0001", "rope=True", "max_depth=3", "ff_dropout=1e-05"]) == {
        "lr": 0.0001, "rope": True, "max_depth": 3, "ff_dropout": 1e-05}
    for bad in ("lr", "lr=fast", "=1"):
        with pytest.raises(ValueError, match="--point"):
            parse_point([bad])


def test_a_grid_point_is_the_authors_selection_with_its_coordinates_put_in() -> None:
    authors = selected_entry("p06_pd3_t3", "multitab_net")
    assert authors is not None and authors["architecture"]["rope"] is True
    point = apply_point(authors, {"lr": 0.01, "att_dropout": 0.2, "ff_dropout": 0.1, "rope": False},
                        model="multitab_net", dataset="p06_pd3_t3")
    assert authors["optimisation"]["lr"] == 0.001  # the selection itself is not changed
    kw = model_defaults("p06_pd3_t3", "multitab_net", "paper", point)
    assert (kw["attention_dropout"], kw["ffn_dropout"], kw["inter_sample"]) == (0.2, 0.1, "attention")
    assert model_defaults("p06_pd3_t3", "multitab_net", "paper", authors)["inter_sample"] == "rope_attention"
    assert training_defaults("p06_pd3_t3", "multitab_net", "paper", point)["lr"] == 0.01
    mmoe = apply_point(selected_entry("p06_pd3_t3", "mmoe"), {"lr": 0.1, "dropout": 0.3}, model="mmoe",
                       dataset="p06_pd3_t3")
    assert model_defaults("p06_pd3_t3", "mmoe", "paper", mmoe)["dropout"] == 0.3
    assert training_defaults("p06_pd3_t3", "mmoe", "paper", mmoe)["lr"] == 0.1
    build_model("mmoe", BENCH, protocol="paper", entry=mmoe)  # the keywords are the model's
    xgb = apply_point(None, {"max_depth": 4, "learning_rate": 0.05, "n_rounds": 50}, model="xgboost", dataset="higgs")
    assert model_defaults("higgs", "xgboost", "paper", xgb) == {"max_depth": 4, "learning_rate": 0.05,
                                                                "binary_learning_rate": 0.05, "n_rounds": 50}
    with pytest.raises(ValueError, match="no selection to sweep from"):
        apply_point(None, {"lr": 0.1}, model="saint", dataset="p06_pd3_t3")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['momentum'\]"):
        apply_point(authors, {"momentum": 0.9}, model="multitab_net", dataset="p06_pd3_t3")


def _sweep(vals: list[float | None]) -> Sweep:
    grid = {"lr": (0.001, 0.01), "dropout": (0.0, 0.1)}
    coords = [{"lr": a, "dropout": b} for a in grid["lr"] for b in grid["dropout"]]
    points = [Point(coords=c, order=i, records={0: {"val_mean": v, "test_mean": v, "train_seconds": 1.0,
                                                      "best_epoch": 1, "epochs": 2}})
              for i, (c, v) in enumerate(zip(coords, vals))]
    return Sweep("p06_pd3_t3", "mmoe", "mlp", grid, (0,), points)


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
    for fam in ("mlp", "transformer", "inter_sample", "xgboost"):
        raw["sweep"][fam]["data"] = []
    raw["sweep"]["mlp"].update(models=["mmoe"], grid={"lr": [0.001, 0.01], "dropout": [0.0, 0.1]}, data=[
        {"name": "p06_pd3_t3", "data": "x", "verdict": "y"}])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def test_collect_names_a_missing_point_and_a_point_of_another_grid(tmp_path: Path) -> None:
    path, _ = _small_sweep_params(tmp_path)
    sweep = load_params(path).sweep
    runs = tmp_path / "runs"
    coords = [{"lr": a, "dropout": b} for a in (0.001, 0.01) for b in (0.0, 0.1)]
    for c in coords[:3]:
        _write_point(runs, "p06_pd3_t3", "mmoe", c, 0, 0.5)
    with pytest.raises(SweepError, match=r"lr0.01-dropout0.1/seed0/metrics.json: grid point not trained"):
        collect(runs, sweep)
    _write_point(runs, "p06_pd3_t3", "mmoe", {"lr": 0.01, "dropout": 0.2}, 0, 0.9)  # another grid's leftover
    shutil.copytree(runs / "p06_pd3_t3/mmoe/lr0.01-dropout0.2", runs / "p06_pd3_t3/mmoe/lr0.01-dropout0.1")
    with pytest.raises(SweepError, match=r"holds grid point \{'lr': 0.01, 'dropout': 0.2\}"):
        collect(runs, sweep)
    _write_point(runs, "p06_pd3_t3", "mmoe", coords[3], 0, 0.7)
    sweeps = collect(runs, sweep)  # the leftover folder lr0.01-dropout0.2 is ignored
    assert [len(s.points) for s in sweeps] == [4] and sweeps[0].selected.coords == coords[3]


def test_outputs_selection_in_the_authors_format_report_and_figure(tmp_path: Path) -> None:
    path, _ = _small_sweep_params(tmp_path)
    sweep = load_params(path).sweep
    runs = tmp_path / "runs"
    for c, v in zip([{"lr": a, "dropout": b} for a in (0.001, 0.01) for b in (0.0, 0.1)], [0.4, 0.5, 0.8, 0.6]):
        _write_point(runs, "p06_pd3_t3", "mmoe", c, 0, v)
    out = tmp_path / "sweeps"
    summary = write_sweep_outputs(collect(runs, sweep), selected_path=tmp_path / "swept.yaml", out=out,
                                  protocol="paper")
    assert summary["p06_pd3_t3"]["mmoe"]["point"] == "lr0.01-dropout0.0"
    chosen = yaml.safe_load((tmp_path / "swept.yaml").read_text())
    entry = chosen["p06_pd3_t3"]["mmoe"]
    authors = selected_entry("p06_pd3_t3", "mmoe")
    assert authors is not None
    assert entry["architecture"] == authors["architecture"]  # same format, the architecture untouched
    assert (entry["optimisation"]["lr"], entry["optimisation"]["dropout"]) == (0.01, 0.0)
    assert entry["selected_by"]["value"] == 0.8 and entry["selected_by"]["seeds"] == [0]
    # the training path reads it as it reads the authors'
    assert selected_entry("p06_pd3_t3", "mmoe", chosen) is entry
    assert model_defaults("p06_pd3_t3", "mmoe", "paper", entry)["dropout"] == 0.0
    report = (out / "report.md").read_text()
    assert "**Selected**: lr0.01-dropout0.0: validation 0.8000" in report
    assert "| 1 | lr0.01-dropout0.0 **(selected)** | 0.8000 |" in report
    a_lr, a_do = authors["optimisation"]["lr"], authors["optimisation"]["dropout"]
    assert f"The authors' selection (multitab_bench_example): lr{a_lr}-dropout{a_do}" in report
    assert (out / "figures" / "p06_pd3_t3-mmoe.png").stat().st_size > 1000
    rows = (out / "points.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[1].startswith("p06_pd3_t3,mmoe,1,True,0.01,0.0,")


# ------------------------------------------------------------------------------------------ end to end

def _toy_project(root: Path) -> Path:
    """A git + DVC project holding the repo's own stages sweep_mlp, sweep_select and train (dvc.yaml, as
    written there), its stage scripts and library, params with a 2 x 2 grid of STL on a tiny stand-in, and
    `train.hparams: swept`."""
    root.mkdir()
    for folder in ("stages", "src/multitab"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    keep = {k: stages[k] for k in ("train", "sweep_mlp", "sweep_select")}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": keep}, sort_keys=False))
    raw = raw_params()
    params = {
        "protocol": "paper",
        "train": {**raw["train"], "datasets": ["tiny"], "models": ["stl_mlp"], "seeds": [0], "max_epochs": 2,
                  "max_train_rows": None, "batch_size": 64, "progress": False, "hparams": "swept"},
        "sweep": copy.deepcopy(raw["sweep"]),
        "orchestration": {**raw["orchestration"], "workers": 1, "retries": 0, "summary": "results/pipeline_summary.json"},
    }
    for fam in ("mlp", "transformer", "inter_sample", "xgboost"):
        params["sweep"][fam]["data"] = []
    params["sweep"]["train"] = {"max_epochs": 3}
    params["sweep"]["mlp"].update(
        models=["stl_mlp"], grid={"lr": [0.001, 0.1], "dropout": [0.0, 0.2]},
        data=[{"name": "tiny", "data": "data/processed/tiny", "verdict": "data/validated/tiny.json"}])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    tasks = [{"name": "y1", "type": "regression", "n_classes": None}, {"name": "y2", "type": "binary", "n_classes": None}]
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


def _flow(root: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "false", "PYTHONUNBUFFERED": "1",
           "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONPATH": os.pathsep.join([str(root), str(ROOT / "src"), str(ROOT)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PREFECT_API_URL", None)
    return subprocess.Popen([sys.executable, "-m", "flows.pipeline", "--root", str(root)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _locked_points(root: Path) -> set[str]:
    try:
        lock = yaml.safe_load((root / "dvc.lock").read_text()) or {}
    except (FileNotFoundError, yaml.YAMLError):  # not written yet, or being rewritten
        return set()
    return {s for s in lock.get("stages", {}) if s.startswith("sweep_mlp@")}


def test_sweep_killed_after_its_first_point_resumes_without_retraining_it(tmp_path: Path) -> None:
    root = _toy_project(tmp_path / "p")
    home = tmp_path / "prefect"
    # The default run: train@tiny-stl_mlp-0 reads hparams/swept.yaml (train.hparams: swept), so the flow
    # brings in the opt-in sweep stages. Killed (the flow and its DVC subprocess) once a point is recorded.
    proc = _flow(root, home)
    deadline = time.monotonic() + 240
    while not _locked_points(root):
        assert proc.poll() is None, f"the flow ended before any grid point was recorded:\n{proc.stdout.read() if proc.stdout else ''}"
        assert time.monotonic() < deadline, "no grid point recorded in 240 s"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _locked_points(root)
    assert len(first) < 4 and not (root / "hparams" / "swept.yaml").exists()
    points = root / "results" / "sweep_runs" / "tiny" / "stl_mlp"
    done = {}
    for stage in first:  # sweep_mlp@data0-stl_mlp-<lr>-<dropout>-<seed>
        lr, dropout = stage.split("@")[1].split("-")[2:4]
        done[f"lr{lr}-dropout{dropout}"] = (points / f"lr{lr}-dropout{dropout}" / "seed0" / "metrics.json").read_bytes()

    proc = _flow(root, home)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    summary = json.loads((root / "results" / "pipeline_summary.json").read_text())
    stages = summary["stages"]
    # the points recorded before the kill were not trained again; the others ran, then selection, then training
    assert {s for s in first if stages[s]["status"] == "up_to_date" or s not in stages} == first
    assert {s for s in stages if s.startswith("sweep_mlp@") and stages[s]["status"] == "ran"} == (
        {s for s in stages if s.startswith("sweep_mlp@")} - first)
    assert stages["sweep_select"]["status"] == "ran" and stages["train@tiny-stl_mlp-0"]["status"] == "ran"
    for name, data in done.items():
        assert (points / name / "seed0" / "metrics.json").read_bytes() == data, f"{name} was trained again"
    chosen = yaml.safe_load((root / "hparams" / "swept.yaml").read_text())["tiny"]["stl_mlp"]
    run = json.loads((root / "results" / "runs" / "tiny" / "stl_mlp" / "seed0" / "metrics.json").read_text())
    assert run["hparams"]["source"] == "swept"
    assert run["optimizer"]["lr"] == chosen["optimisation"]["lr"] == chosen["selected_by"]["point"]["lr"]
    assert run["hparams"]["entry"]["optimisation"]["dropout"] == chosen["selected_by"]["point"]["dropout"]
    report = (root / "results" / "sweeps" / "report.md").read_text()
    assert "## stl_mlp on tiny" in report and report.count("| lr") == 4
    assert (root / "results" / "sweeps" / "figures" / "tiny-stl_mlp.png").exists()


def test_every_family_has_a_stage_whose_folders_are_the_point_ids() -> None:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for family, grid in PAPER_GRIDS.items():
        stage = stages[f"sweep_{family}"]
        assert list(stage["matrix"]) == ["data", "model", *grid, "seed"], family
        assert stage["meta"] == {"opt_in": True}
        folder = "-".join(f"{a}${{item.{a}}}" for a in grid)  # point_id's format, filled in by DVC
        assert "--point " + " ".join(f"{a}=${{item.{a}}}" for a in grid) in stage["cmd"]
        assert f"results/sweep_runs/${{item.data.name}}/${{item.model}}/{folder}/seed${{item.seed}}" in stage["cmd"]
    assert point_id({"lr": 0.0001, "rope": True}) == "lr0.0001-ropetrue"  # as DVC fills them in
    assert stages["sweep_select"]["meta"] == {"opt_in": True}
    for name in ("train", "train_bench", "train_ablation", "train_study"):
        assert "--hparams hparams/${train.hparams}.yaml" in stages[name]["cmd"], name
        assert "hparams/${train.hparams}.yaml" in stages[name]["deps"], name
