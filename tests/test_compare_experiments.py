"""`make compare` (multitab.evaluation.experiments): DVC experiments side by side on one screen, on a toy
project shaped like this one (a metrics.json per run, a summary results/metrics.json, a params.yaml of
sections) with two real `dvc exp run -S` experiments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from multitab.evaluation import experiments
from multitab.evaluation.experiments import compare_table, revisions

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

TRAIN = """
import json, pathlib, yaml
p = yaml.safe_load(open("params.yaml"))
for d in ("aliexpress", "acs_income", "higgs"):
    for m in ("stl_mlp", "mmoe", "multitab_net"):
        out = pathlib.Path(f"results/runs/{d}/{m}/seed0"); out.mkdir(parents=True, exist_ok=True)
        json.dump({"test": {"t1": 0.5 + p["train"]["max_epochs"] / 100}, "epochs": p["train"]["max_epochs"],
                   "params": p}, open(out / "metrics.json", "w"))
"""
AGGREGATE = """
import json, pathlib
runs = sorted(pathlib.Path("results/runs").glob("*/*/seed0/metrics.json"))
e = json.loads(runs[0].read_text())["epochs"]
labels = {"stl_mlp": "STL", "mmoe": "MMoE", "multitab_net": "MultiTab-Net"}
json.dump({"standin": {d: True for d in ("aliexpress", "acs_income", "higgs")},
           "delta_m": {d: {labels[m]: round(e * (i + 1) * 0.5, 3) for i, m in enumerate(labels)}
                       for d in ("aliexpress", "acs_income", "higgs")}},
          open("results/metrics.json", "w"))
"""


def sh(root: Path, *args: str) -> str:
    res = subprocess.run(args, cwd=root, env=ENV, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    return res.stdout


def test_two_experiments_differing_in_one_param_fit_on_a_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(TRAIN))
    (root / "aggregate.py").write_text(textwrap.dedent(AGGREGATE))
    # the summary is a DVC metric kept in the cache, as dvc.yaml's aggregate stage declares it: a file
    # only in the workspace (cache: false, git-ignored) is in no experiment, and `dvc exp show` reads "!"
    aggregate = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["aggregate"]
    assert {"results/metrics.json": {"cache": True}} in aggregate["metrics"]
    runs = [f"results/runs/{d}/{m}/seed0/metrics.json" for d in ("aliexpress", "acs_income", "higgs")
            for m in ("stl_mlp", "mmoe", "multitab_net")]
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "train": {"cmd": "python train.py", "deps": ["train.py"], "params": ["train", "protocol"],
                  "metrics": [{r: {"cache": True}} for r in runs]},
        "aggregate": {"cmd": "python aggregate.py", "deps": ["aggregate.py", *runs],
                      "metrics": [{"results/metrics.json": {"cache": True}}]},
    }}, sort_keys=False))
    (root / "params.yaml").write_text(yaml.safe_dump({
        "protocol": "paper", "train": {"max_epochs": 2, "lr": 0.001, "batch_size": 2048},
        "datasets": {d: {"source": "standin", "split": {"seed": 0}} for d in ("aliexpress", "acs_income", "higgs")},
    }, sort_keys=False))
    (root / ".gitignore").write_text("/results/\n")
    sh(root, "git", "init", "-q")
    # what `dvc init` writes (a DVC start saved); the baseline commit is never reproduced: its row has no summary
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    (root / ".dvcignore").write_text("")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "toy")
    for name, epochs in (("epochs3", 3), ("epochs4", 4)):
        sh(root, sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", name, "-S", f"train.max_epochs={epochs}")

    # `make compare`, in this process; its `dvc exp show --json` kept for the checks after
    shown_by_dvc: list[subprocess.CompletedProcess[str]] = []
    real_run = subprocess.run

    def run(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        shown_by_dvc.append(real_run(*args, **kwargs))  # type: ignore[call-overload]
        return shown_by_dvc[-1]

    for key in ("DVC_NO_ANALYTICS", "DO_NOT_TRACK", "PATH"):
        monkeypatch.setenv(key, ENV[key])
    monkeypatch.setattr(experiments.subprocess, "run", run)
    assert experiments.main(["--project", str(root)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120, out
    header = lines[0].split()
    assert {"epochs3", "epochs4"} <= set(header), out
    row = next(line for line in lines if line.startswith("param train.max_epochs")).split()
    assert row[2 + header.index("epochs3")] == "3" and row[2 + header.index("epochs4")] == "4", out
    dm = next(line for line in lines if line.startswith("delta_m.higgs.MultiTab-Net")).split()
    assert dm[1 + header.index("epochs3")] == "4.5" and dm[1 + header.index("epochs4")] == "6", out
    assert "param train.lr" not in out and "results/runs" not in out  # unchanged params, per-run metrics
    assert "without results/metrics.json recorded (not shown):" in out  # the baseline commit, never reproduced

    # what plain `dvc exp show` would print: a column per param and metric (and dependency), hundreds
    shown = json.loads(shown_by_dvc[0].stdout)
    columns = {f"{f}:{k}" for f in ["results/metrics.json", *runs] for rev in revisions(shown, summaries=[f])
               for k in rev.metrics or {}}
    assert len(columns) > 100
    # one experiment named (`make compare EXPS=epochs3`): it and the rows it branches from
    one = compare_table(revisions(shown, names=["epochs3"]))
    assert "epochs3" in one and "epochs4" not in one
