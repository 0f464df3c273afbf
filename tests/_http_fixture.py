"""A scriptable HTTP server on 127.0.0.1 for download tests.

Each path has a list of responses, used in turn (the last one repeats). A response can honour or ignore
Range, send a status, or drop the connection after some bytes. Every request is recorded with its headers.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    body: bytes = b""
    status: int = 200
    honour_range: bool = True
    drop_after: int | None = None  # bytes of the body sent before the connection is cut
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        return self.headers.get("Range")


class FixtureServer:
    def __init__(self) -> None:
        self.routes: dict[str, list[Reply]] = {}
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append(Seen(self.path, dict(self.headers.items())))
                    replies = server.routes.get(self.path)
                    if not replies:
                        reply = Reply(status=404, body=b"not found")
                    else:
                        reply = replies.pop(0) if len(replies) > 1 else replies[0]
                server._serve(self, reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FixtureServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def add(self, path: str, *replies: Reply) -> str:
        self.routes[path] = list(replies)
        return self.url(path)

    def seen(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]

    @staticmethod
    def _serve(h: BaseHTTPRequestHandler, reply: Reply) -> None:
        body = reply.body
        status = reply.status
        start = 0
        rng = h.headers.get("Range")
        if status == 200 and rng and reply.honour_range and rng.startswith("bytes="):
            start = int(rng[6:].split("-", 1)[0])
            if start >= len(body):
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(body)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            status = 206
        payload = body[start:]
        h.send_response(status)
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        if reply.honour_range:
            h.send_header("Accept-Ranges", "bytes")
        for k, v in reply.headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if reply.drop_after is not None:
            h.wfile.write(payload[: reply.drop_after])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.wfile.write(payload)
