"""The projects benchmarks/fault_injection.py runs twice (clean and with faults): a small toy DAG built in a
temporary folder (prepare -> features@x -> train@x with checkpoints -> aggregate), or a copy of a DVC project's
files in a fresh git + DVC repository. A module beside the script, not a script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from multitab.config import read_yaml

REPO = Path(__file__).resolve().parent.parent

ITEMS = "abcdef"
TOY_STAGES: dict[str, Any] = {
    "prepare": {
        "cmd": "python toy.py prepare",
        "deps": ["toy.py"],
        "params": [{"toy.yaml": ["rows"]}],  # its own file: params.yaml holds only known sections
        "outs": ["data/raw.json"],
    },
    "features": {
        "foreach": list(ITEMS),
        "do": {
            "cmd": "python toy.py features ${item}",
            "deps": ["toy.py", "data/raw.json"],
            "outs": ["data/features_${item}.json"],
        },
    },
    "train": {
        "foreach": list(ITEMS),
        "do": {
            "cmd": "python toy.py train ${item}",
            "deps": ["toy.py", "data/features_${item}.json"],
            "params": [{"toy.yaml": ["epochs"]}],
            "outs": ["results/model_${item}.json"],
        },
    },
    "aggregate": {
        "cmd": "python toy.py aggregate",
        "deps": ["toy.py", *(f"results/model_{m}.json" for m in ITEMS)],
        "metrics": [{"results/summary.json": {"cache": False}}],
    },
}

TOY_SCRIPT = '''"""Toy stages: deterministic, with a training loop that checkpoints every epoch and resumes."""
import json, pathlib, sys, time, yaml

params = yaml.safe_load(open("toy.yaml"))
step, arg = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
if step == "prepare":
    pathlib.Path("data").mkdir(exist_ok=True)
    json.dump([(i * 7919) % 1000 for i in range(params["rows"])], open("data/raw.json", "w"))
elif step == "features":
    raw = json.load(open("data/raw.json"))
    k = "abcdef".index(arg) + 2
    json.dump([x * k % 997 for x in raw], open(f"data/features_{arg}.json", "w"))
elif step == "train":
    xs = json.load(open(f"data/features_{arg}.json"))
    ckpt = pathlib.Path(f"checkpoints/{arg}.json")  # outside DVC's outs: survives a killed attempt
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"epoch": 0, "w": 0.0}
    if state["epoch"]:
        print(f"train@{arg}: resumed from the checkpoint of epoch {state['epoch']}", flush=True)
    while state["epoch"] < params["epochs"]:
        time.sleep(params["epoch_seconds"])
        state = {"epoch": state["epoch"] + 1, "w": round(state["w"] * 0.5 + sum(xs) / len(xs), 6)}
        ckpt.parent.mkdir(exist_ok=True)
        tmp = ckpt.with_suffix(".tmp"); tmp.write_text(json.dumps(state)); tmp.replace(ckpt)
    pathlib.Path("results").mkdir(exist_ok=True)
    json.dump({"w": state["w"], "epochs": state["epoch"]}, open(f"results/model_{arg}.json", "w"))
    ckpt.unlink()
elif step == "aggregate":
    models = {m: json.load(open(f"results/model_{m}.json")) for m in "abcdef"}
    json.dump({m: v["w"] for m, v in models.items()}, open("results/summary.json", "w"), sort_keys=True)
'''


def build_toy(root: Path) -> None:
    import yaml

    root.mkdir(parents=True)
    (root / "toy.py").write_text(TOY_SCRIPT)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": TOY_STAGES}, sort_keys=False))
    orchestration = read_yaml(REPO / "params.yaml")["orchestration"]
    (root / "toy.yaml").write_text(yaml.safe_dump({"rows": 2000, "epochs": 6, "epoch_seconds": 0.5}))
    (root / "params.yaml").write_text(yaml.safe_dump({"orchestration": orchestration}, sort_keys=False))
    (root / ".gitignore").write_text("/checkpoints/\n")


def copy_project(src: Path, dst: Path) -> None:
    """The files git would see (tracked, plus untracked not ignored), into a fresh git + DVC repo."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, files):
        if (src / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)
    (dst / "dvc.lock").unlink(missing_ok=True)  # both runs start from nothing
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    if not (dst / ".dvc").is_dir():
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=dst, check=True)
    # A commit, as in a clone: dvclive (training stages) reads HEAD and fails in a repository without one.
    git_env = {**os.environ, "GIT_AUTHOR_NAME": "fault-injection", "GIT_AUTHOR_EMAIL": "fi@localhost",
               "GIT_COMMITTER_NAME": "fault-injection", "GIT_COMMITTER_EMAIL": "fi@localhost"}
    subprocess.run(["git", "add", "-A"], cwd=dst, check=True, env=git_env)
    subprocess.run(["git", "commit", "-q", "-m", "snapshot"], cwd=dst, check=True, env=git_env)
