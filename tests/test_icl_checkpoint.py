"""Checkpoints of the pretrained in-context models: the sha256 pin on a local file and on a file fetched
from a fake model hub on 127.0.0.1 (HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from multitab.icl import checkpoint

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _FakeHub:
    """Serves one file, `/<repo>/resolve/<revision>/<filename>`, as a model hub answers a download."""

    def __init__(self, repo_id: str, filename: str, body: bytes) -> None:
        self.requests: list[str] = []
        hub = self
        path = f"/{repo_id}/resolve/main/{filename}"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _head(self) -> bool:
                hub.requests.append(f"{self.command} {self.path}")
                if self.path.split("?")[0] != path:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return False
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return True

            def do_HEAD(self) -> None:
                self._head()

            def do_GET(self) -> None:
                if self._head():
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


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
    with _FakeHub("Lab/Model", "model.ckpt", body) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        path = checkpoint.fetch("Lab/Model", "model.ckpt", sha256=pin, cache_dir=tmp_path / "cache")
        assert path.read_bytes() == body
        assert checkpoint.load(path, pin)[1] == pin

    wrong = b"not the released weights"
    with _FakeHub("Lab/Other", "model.ckpt", wrong) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(checkpoint.CheckpointError) as refused:
            checkpoint.fetch("Lab/Other", "model.ckpt", sha256=pin, cache_dir=tmp_path / "cache")
    assert f"expected sha256 {pin}, found {hashlib.sha256(wrong).hexdigest()}" in str(refused.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.read_bytes() == wrong]


def test_fetch_command_pins_what_params_name(tmp_path, monkeypatch, capsys):
    import yaml

    from multitab.icl import fetch as fetch_cli

    body = _checkpoint_bytes(tmp_path)
    pin = hashlib.sha256(body).hexdigest()
    entry = {"path": None, "sha256": None, "hub_repo": "Lab/Model", "hub_file": "model.ckpt"}
    icl = {"models": ["orion_msp"], "datasets": [], "seeds": [0], "context_size": 10, "context_rule": "uniform",
           "chunk_size": 4, "n_estimators": 1, "device": "cpu", "checkpoints": {"orion_msp": entry},
           "orion": {"window": "reference", "memory": "reference", "links": "seeded", "link_seed": 0}, "out": "x"}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"icl": icl}))
    with _FakeHub("Lab/Model", "model.ckpt", body) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        cache = str(tmp_path / "cache")
        assert fetch_cli.main(["orion_msp", "--params", str(params), "--cache", cache]) == 0
        assert f"sha256 {pin} (not pinned yet" in capsys.readouterr().out
        assert fetch_cli.main(["orion_msp", "--params", str(params), "--cache", cache, "--sha256", pin]) == 0
        assert fetch_cli.main(["orion_msp", "--params", str(params), "--cache", cache, "--sha256", "1" * 64]) == 3
        assert f"expected sha256 {'1' * 64}, found {pin}" in capsys.readouterr().err
