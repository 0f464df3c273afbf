"""Checkpoints of the pretrained in-context models: the sha256 pin on a local file and on a file fetched
from a fake model hub on 127.0.0.1 (HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from _fake_hub import COMMIT, FakeHub
from multitab.icl import checkpoint


def _checkpoint_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "made.ckpt"
    torch.save({"config": {"embed_dim": 8}, "state_dict": {"w": torch.ones(2)}}, path)
    return path.read_bytes()


def test_local_checkpoint_is_checked_against_its_pin(tmp_path):
    body = _checkpoint_bytes(tmp_path)
    path = tmp_path / "model.ckpt"
    path.write_bytes(body)
    pin = hashlib.sha256(body).hexdigest()
    loaded, found = checkpoint.load(path, pin)
    assert found == pin and loaded["config"] == {"embed_dim": 8}
    with pytest.raises(checkpoint.CheckpointError, match=f"expected sha256 {'0' * 64}, found {pin}"):
        checkpoint.load(path, "0" * 64)
    with pytest.raises(checkpoint.CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "absent.ckpt", pin)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "code.ckpt"
    torch.save({"config": {}, "state_dict": {}, "hook": _checkpoint_bytes}, path)  # pickles a function
    with pytest.raises(checkpoint.CheckpointError, match="is refused: it holds pickled Python code") as refused:
        checkpoint.load(path, None)
    assert "weights_only" not in str(refused.value)


def test_hub_fetch_pins_the_file(tmp_path, monkeypatch):
    body = _checkpoint_bytes(tmp_path)
    pin = hashlib.sha256(body).hexdigest()
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with FakeHub({("Lab/Model", "model.ckpt"): body}) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        path, commit = checkpoint.fetch("Lab/Model", "model.ckpt", sha256=pin, cache_dir=tmp_path / "cache")
        assert path.read_bytes() == body and commit == COMMIT
        assert checkpoint.load(path, pin)[1] == pin
        pinned = "f" * 40
        assert checkpoint.fetch("Lab/Model", "model.ckpt", sha256=pin, cache_dir=tmp_path / "cache",
                                revision=pinned)[1] == pinned

    wrong = b"not the released weights"
    with FakeHub({("Lab/Other", "model.ckpt"): wrong}) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(checkpoint.CheckpointError) as refused:
            checkpoint.fetch("Lab/Other", "model.ckpt", sha256=pin, cache_dir=tmp_path / "cache")
    assert f"expected sha256 {pin}, found {hashlib.sha256(wrong).hexdigest()}" in str(refused.value)
    assert "Lab/Other/model.ckpt" in str(refused.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.read_bytes() == wrong]
