"""The same-results check (multitab.evaluation.bench.same_results): a run trained again, compared field by field and
epoch by epoch with the copy flows.progress saved of its first training (DVC's cache layout), and refused when it
was only restored from the cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from tests._training_tiny import register_tiny, write_tiny_processed, write_tiny_project

from multitab.evaluation.bench.numbers import StudyError
from multitab.evaluation.bench.same_results import compare, main, run_files, saved_run
from stages import train as train_stage

torch.set_num_threads(1)
KEY = "real-tiny-tiny-0"
RUN = Path("results/runs/tiny/tiny/seed0")


@pytest.fixture(autouse=True)
def _tiny_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    register_tiny(monkeypatch)


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()  # noqa: S324 - DVC's content address, not a security hash


def _put(progress: Path, data: bytes, name: str | None = None) -> str:
    name = name or _md5(data)
    path = progress / "files" / "md5" / name[:2] / name[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return name


def save_like_progress(run_dir: Path, progress: Path, key: str) -> None:
    """What flows.progress saves of a finished run: its outputs' objects, the run-cache entry naming them, and
    index.json."""
    listing = [{"md5": _put(progress, p.read_bytes()), "relpath": p.name}
               for p in sorted((run_dir / "dvclive" / "plots" / "metrics").glob("*.tsv"))]
    blob = json.dumps(listing).encode()
    folder = _put(progress, blob, _md5(blob) + ".dir")
    entry = {"cmd": f"python -m stages.train --run {key}",
             "outs": [{"path": f"{RUN}/dvclive/plots/metrics", "md5": folder},
                      {"path": f"{RUN}/metrics.json", "md5": _put(progress, (run_dir / "metrics.json").read_bytes())}]}
    rel = Path("runs") / "ab" / "abcdef" / "0123"
    (progress / rel).parent.mkdir(parents=True, exist_ok=True)
    (progress / rel).write_text(yaml.safe_dump(entry))
    (progress / "index.json").write_text(json.dumps({key: {"entry": rel.as_posix(), "commit": "abc1234def",
                                                           "cpu": "Test CPU", "saved": "2026-01-01T00:00:00Z"}}))


def test_a_run_trained_again_is_compared_bit_for_bit_with_its_saved_first_training(tmp_path: Path) -> None:
    data = tmp_path / "processed" / "tiny"
    write_tiny_processed(data)
    first, again = tmp_path / "first", tmp_path / "again"
    for root in (first, again):
        params = write_tiny_project(root, data=data, train={"max_epochs": 3})
        assert train_stage.main(["--run", KEY, "--params", str(params)]) == 0
    progress = tmp_path / "progress"
    save_like_progress(first / RUN, progress, KEY)
    saved = saved_run(progress, KEY)
    assert json.loads(saved["metrics.json"].read_text()) == json.loads((first / RUN / "metrics.json").read_text())
    rows = pd.DataFrame(compare(KEY, saved, run_files(again / RUN)))
    assert rows["equal"].all() and {"test.click", "best_epoch", "val_mean@3", "train_loss@1"} <= set(rows["field"])
    out = tmp_path / "record"
    assert main(["--runs", str(again / "results/runs"), "--keys", "real-*", "--progress", str(progress), "--to",
                 str(out), "--note", "Tiny check."]) == 0
    section = (out / "section.md").read_text()
    assert "**1 of 1 runs bit-identical**" in section and "trained at abc1234 (Test CPU)" in section
    assert pd.read_csv(out / "runs.csv")["equal"].all()
    # a run restored from the cache (its timing too is the saved one's) shows nothing about today's code
    with pytest.raises(StudyError, match="restored from DVC's cache"):
        compare(KEY, saved, run_files(first / RUN))
    # a run that differs says where
    record = json.loads((again / RUN / "metrics.json").read_text())
    record["test"]["click"] += 1e-12
    (again / RUN / "metrics.json").write_text(json.dumps(record))
    rows = pd.DataFrame(compare(KEY, saved, run_files(again / RUN)))
    assert rows.loc[~rows["equal"], "field"].tolist() == ["test.click"]
    assert main(["--runs", str(again / "results/runs"), "--keys", "nothing-*", "--progress", str(progress), "--to",
                 str(tmp_path / "none"), "--note", "x"]) == 1
