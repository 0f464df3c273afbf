"""A fake model hub on 127.0.0.1 for huggingface_hub (HF_ENDPOINT): files at `/<repo>/resolve/<revision>/<file>`,
answered as the hub answers a download (HEAD and GET, the commit in X-Repo-Commit, the ETag), at any revision."""

from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the commit the hub's default branch points at


class FakeHub:
    def __init__(self, files: dict[tuple[str, str], bytes]) -> None:
        self.files = files  # (repo, file) -> body; replace an entry to serve other bytes
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _head(self) -> bytes | None:
                hub.requests.append(f"{self.command} {self.path}")
                m = re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", self.path.split("?")[0])
                body = hub.files.get((m.group(1), m.group(3))) if m else None
                if m is None or body is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                revision = m.group(2)
                self.send_response(200)
                self.send_header("X-Repo-Commit", revision if re.fullmatch(r"[0-9a-f]{40}", revision) else COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return body

            def do_HEAD(self) -> None:
                self._head()

            def do_GET(self) -> None:
                body = self._head()
                if body is not None:
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
