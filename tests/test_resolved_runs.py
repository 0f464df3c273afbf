"""A run's whole configuration is resolved once, by `python -m multitab.runs`, into its record in runs.yaml
(multitab.runs.resolve): `show` prints every value with its source before the run trains, a swept file that does not
exist is refused there (no fallback), and DVC, tracking each run's record, re-runs exactly the runs a change
changes (`dvc params diff` and `python -m multitab.runs diff` name them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _toy_dvc import repo_dvc_yaml
from _training_tiny import TINY_TRAIN, write_tiny_hparams, write_tiny_processed
from multitab.models import file_keywords
from multitab.runs.cli import main as runs_main
from multitab.runtime.exit_codes import BAD_INPUT

ROOT = Path(__file__).resolve().parents[1]


def _show(capsys: pytest.CaptureFixture[str], key: str) -> dict[str, tuple[str, str]]:
    """`python -m multitab.runs show <key>` in the repository: name -> (value, source)."""
    assert runs_main(["show", key]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"run {key}: ")
    out = {}
    for line in lines[1:]:
        if " = " in line:
            name, _, rest = line.strip().partition(" = ")
            value, _, source = rest.partition("  ")
            out[name.strip()] = (value.strip(), source.strip())
    return out


def test_show_prints_every_keyword_and_optimiser_value_with_its_source(capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    shown = _show(capsys, "real-higgs-multitab_net-0")
    assert {f"model.{k}" for k in file_keywords("multitab_net")} <= set(shown)
    assert {"optim.optimizer", "optim.lr", "optim.weight_decay", "train.max_epochs", "train.patience",
            "train.batch_size", "train.precision", "train.protocol"} <= set(shown)
    assert all(source for _, source in shown.values())
    file = "hparams/authors/higgs/multitab_net.yaml"
    assert shown["model.d_embedding"] == ("16", file) and shown["optim.lr"] == ("0.001", file)
    # protocol paper: Adam and RoPE attention over the authors' adamw and per-sample mixing
    assert shown["optim.optimizer"] == ("'adam'", "hparams/protocol/paper.yaml: optim.optimizer")
    assert shown["model.inter_sample"][0] == "'rope_attention'"
    assert shown["model.inter_sample"][1].startswith("hparams/protocol/paper.yaml: replace.inter_sample")
    assert shown["train.max_epochs"] == ("2", "params.yaml: train.max_epochs")
    assert shown["train.patience"] == ("5", "params.yaml: train.patience.higgs")
    # a group's `train`, a variant's keywords, a grid point
    assert _show(capsys, "bench-p06_pd3_t3-mmoe-0")["train.max_epochs"] == (
        "6", "params.yaml: runs.bench.train.max_epochs")
    variant = _show(capsys, "ablation-higgs-multitab_net+single_none-0")
    assert variant["model.mask"] == ("'none'", "params.yaml: train.variants.single_none.overrides.mask")
    point = _show(capsys, "sweep_mlp-p06_pd3_t3-mmoe-lr0_01-dropout0_2-0")
    assert point["optim.lr"] == ("0.01", "params.yaml: runs.sweep_mlp.grid.lr: 0.01")
    assert runs_main(["show", "real-higgs-nope-0"]) == BAD_INPUT
    assert "declares no run 'real-higgs-nope-0'" in capsys.readouterr().err


def _project(root: Path, runs: dict, train: dict | None = None) -> Path:
    """A project folder with the repository's hyperparameter files and params.yaml, its `runs` replaced."""
    shutil.copytree(ROOT / "hparams", root / "hparams")
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["runs"] = runs
    raw["train"].update(train or {})
    del raw["study"], raw["attribution"]  # their run groups are replaced
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    return params


def test_swept_without_its_file_is_refused_at_expansion_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                  ) -> None:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    runs = {"bench": {**raw["runs"]["bench"], "data": {"bench": ["p06_pd3_t3"]}, "models": ["mmoe"],
                      "train": {"hparams": "swept"}},
            "sweep_mlp": {**raw["runs"]["sweep_mlp"], "grid": {"lr": [0.001], "dropout": [0.0]}}}
    params = _project(tmp_path, runs)
    out = tmp_path / "runs.yaml"
    args = ["--params", str(params), "--out", str(out)]
    # no fallback to the authors' file: the expansion names the file and who writes it
    assert runs_main(args) == BAD_INPUT
    err = capsys.readouterr().err
    assert "hparams/swept/p06_pd3_t3/mmoe.yaml: not found" in err and "run `make sweep` first" in err
    assert "sweep_mlp" in err and not out.exists()
    # `make sweep`'s expansion: the run that reads the selection waits for it; the sweep's own runs are there
    assert runs_main([*args, "--groups", "sweep_*"]) == 0
    written = yaml.safe_load(out.read_text())["train_runs"]
    assert "bench-p06_pd3_t3-mmoe-0" not in written and "sweep_mlp-p06_pd3_t3-mmoe-lr0_001-dropout0_0-0" in written
    # the selection written (as sweep_select does): the next expansion reads it into the run's record
    swept = tmp_path / "hparams" / "swept" / "p06_pd3_t3" / "mmoe.yaml"
    swept.parent.mkdir(parents=True)
    selection = yaml.safe_load((tmp_path / "hparams" / "authors" / "multitab_bench" / "mmoe.yaml").read_text())
    selection["optim"]["lr"] = 0.0123
    swept.write_text(yaml.safe_dump(selection))
    assert runs_main(args) == 0
    record = yaml.safe_load(out.read_text())["train_runs"]["bench-p06_pd3_t3-mmoe-0"]
    assert record["hparams"]["source"] == "swept" and record["hparams"]["optim"]["lr"] == 0.0123
    # a dataset no sweep group selects for: refused, saying so
    params = _project(tmp_path / "other", {"real": {"data": {"datasets": ["higgs"]}, "models": ["mmoe"], "seeds": [0],
                                                    "train": {"hparams": "swept"}}})
    assert runs_main(["--params", str(params), "--out", str(tmp_path / "other" / "runs.yaml")]) == BAD_INPUT
    err = capsys.readouterr().err
    assert "hparams/swept/higgs/mmoe.yaml: not found" in err and "no sweep group" in err


def _run(root: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "DVC_NO_UPDATER": "1",
           "GIT_CONFIG_NOSYSTEM": "1",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


@pytest.mark.slow  # dvc repro of two train stages (137 s at load 10 on 2 cores); test_opt_in_groups runs dvc exp run -S
def test_a_changed_value_reruns_exactly_the_runs_it_changes(tmp_path: Path) -> None:
    """Two run groups of one STL run each: a group's `train` changed and runs.yaml written again (the `runs` stage
    does it under `dvc repro`), DVC finds that group's run changed and the other not, and the diffs name it with
    the value."""
    root = tmp_path / "p"
    root.mkdir()
    for folder in ("stages", "src/multitab"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    write_tiny_hparams(root, ["stl_mlp"])
    shutil.copytree(ROOT / "hparams" / "authors" / "multitab_bench", root / "hparams" / "authors" / "multitab_bench")
    one = {"data": {"datasets": ["tiny"]}, "models": ["stl_mlp"], "seeds": [0], "train": {}}
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    params = {"protocol": "paper", "train": {**TINY_TRAIN, "max_epochs": 1, "device": "cpu"},
              "runs": {"a": one, "b": {**one, "out": "results/b_runs", "checkpoints": "results/b_checkpoints"}},
              "orchestration": raw["orchestration"]}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.yaml").write_text(yaml.safe_dump(repo_dvc_yaml(["runs", "train"], params), sort_keys=False))
    write_tiny_processed(root / "data" / "processed" / "tiny", n={"train": 200, "val": 100, "test": 100})
    (root / "data" / "validated").mkdir(parents=True)
    (root / "data" / "validated" / "tiny.json").write_text(json.dumps({"success": True}))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    _run(root, sys.executable, "-m", "multitab.runs")
    _run(root, "git", "init", "-q")
    _run(root, sys.executable, "-m", "dvc", "init", "-q")
    _run(root, *git, "add", "-A")
    _run(root, *git, "commit", "-qm", "init")  # dvclive reads HEAD
    out = _run(root, sys.executable, "-m", "dvc", "repro")
    assert "Running stage 'train@a-tiny-stl_mlp-0'" in out and "Running stage 'train@b-tiny-stl_mlp-0'" in out
    _run(root, *git, "add", "-A")
    _run(root, *git, "commit", "-qm", "trained")

    params["runs"]["b"]["train"] = {"max_epochs": 2}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    diff = _run(root, sys.executable, "-m", "multitab.runs", "diff")
    # the value the run trains with, and what params.yaml says about the run (metrics.json's `params`)
    assert diff.splitlines() == ["b-tiny-stl_mlp-0: train.max_epochs: 1 -> 2",
                                 "b-tiny-stl_mlp-0: params.train.max_epochs: 1 -> 2"]
    _run(root, sys.executable, "-m", "multitab.runs")  # as the `runs` stage does under `dvc repro`
    changed = _run(root, sys.executable, "-m", "dvc", "params", "diff", "--json")
    assert set(json.loads(changed)["runs.yaml"]) == {"train_runs.b-tiny-stl_mlp-0.train.max_epochs",
                                                     "train_runs.b-tiny-stl_mlp-0.params.train.max_epochs"}
    stale = json.loads(_run(root, sys.executable, "-m", "dvc", "status", "--json"))
    assert {s for s in stale if s.startswith("train@")} == {"train@b-tiny-stl_mlp-0"}


def test_the_loops_settings_have_no_defaults_and_a_record_lacking_a_key_is_refused_naming_it() -> None:
    from multitab.training.settings import RunSettings

    with pytest.raises(TypeError, match="missing"):
        RunSettings(seed=0, max_epochs=1, patience=1)  # type: ignore[call-arg]
    from multitab.runs.record import RecordError, RunConfig

    record = yaml.safe_load((ROOT / "runs.yaml").read_text())["train_runs"]["real-higgs-mmoe-0"]
    assert RunConfig.from_record(record, "r").train.batch_size == record["train"]["batch_size"]
    del record["train"]["batch_size"]
    with pytest.raises(RecordError, match=r"r: train: keys \['batch_size'\] missing"):
        RunConfig.from_record(record, "r")


RUNS_DAMAGE = {  # runs.yaml as it may be found: (its text, from the repository's, or None: absent; the message)
    "missing": (lambda text: None, r"no such file, so there is nothing to compare with: write it \(`python -m multi"),
    "empty": (lambda text: "", r"not readable as runs\.yaml \(not YAML, or cut short\); restore it"),
    "cut between lines": (lambda text: text[: text.index("\ntrain_stacks:") + 1],  # after train_runs' last line
                          r"cut short or edited \(no train_stacks, .*sweep_selections\); restore it \(`git checkout"),
    "cut inside a line": (lambda text: text[: len(text) // 3 + 7], r"(not readable as runs\.yaml|cut short or edited)"),
    "cut in its last section": (lambda text: text.rstrip().rsplit("\n", 1)[0] + "\nsweep_selections:\n",
                                r"cut short or edited \(no sweep_selections\)"),
}


@pytest.mark.parametrize("damage", list(RUNS_DAMAGE))
def test_diff_refuses_a_runs_yaml_missing_or_cut_short_naming_it(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without every section, every run after the cut would be reported "added" (exit 0): refused, naming the file
    and what to do."""
    monkeypatch.chdir(ROOT)
    make, message = RUNS_DAMAGE[damage]
    runs = tmp_path / "runs.yaml"
    text = make((ROOT / "runs.yaml").read_text())
    if text is not None:
        runs.write_text(text)
    assert runs_main(["diff", "--runs", str(runs)]) == BAD_INPUT
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {runs}: ") and captured.err.count("\n") == 1, captured.err
    assert re.search(message, captured.err) and "added" not in captured.out, captured
    if damage == "empty":  # which opt-in groups it held cannot be read: --keep-groups would keep none
        assert runs_main(["--keep-groups", "--out", str(runs)]) == BAD_INPUT
        assert runs.read_text() == text
