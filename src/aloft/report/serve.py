"""``aloft report RUN --serve``: the report page on 127.0.0.1, redrawn while the runs train.

``GET /`` is the page; it fetches ``GET /data`` (the encoded payload) every ``refresh_s`` seconds
with the last ETag, and the server rebuilds the payload only when a run's files changed (their
sizes and modification times are the ETag), answering 304 otherwise. Standard-library HTTP: two
read-only routes on the loopback interface need no framework.
"""

from __future__ import annotations

import hashlib
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aloft.report.page import encode_payload, render_report, report_payload
from aloft.report.runs import ReportError, load_run

__all__ = ["make_report_server", "serve_report"]

LOOPBACK = "127.0.0.1"


def serve_report(
    run_dirs: list[str], *, port: int = 8765, samples_per_step: int = 32, refresh_s: float = 5.0
) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = make_report_server(run_dirs, port=port, samples_per_step=samples_per_step, refresh_s=refresh_s)
    print(
        f"serving the report of {', '.join(run_dirs)} at http://{LOOPBACK}:{server.server_port}/ (Ctrl-C stops)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def make_report_server(
    run_dirs: list[str], *, port: int = 0, samples_per_step: int = 32, refresh_s: float = 5.0
) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1 (``port`` 0: any free one); ``serve_forever`` runs it."""
    for path in run_dirs:
        load_run(path)  # a path that is not a run fails now, in one line, not on the first request
    state = _Cache(run_dirs, samples_per_step)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/":
                page = render_report(
                    [load_run(p) for p in run_dirs], samples_per_step=samples_per_step, refresh_s=refresh_s
                )
                self._send(page.encode("utf-8"), "text/html; charset=utf-8")
            elif path == "/data":
                etag, body = state.current()
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(HTTPStatus.NOT_MODIFIED)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self._send(body, "text/plain; charset=ascii", etag)
            else:
                self.send_error(HTTPStatus.NOT_FOUND, "the report has / and /data")

        def _send(self, body: bytes, content_type: str, etag: str | None = None) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if etag:
                self.send_header("ETag", etag)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a request every few seconds would drown the terminal

    try:
        return ThreadingHTTPServer((LOOPBACK, port), Handler)
    except OSError as error:
        raise ReportError(
            f"cannot serve on {LOOPBACK}:{port} ({error.strerror}); pass another --port"
        ) from None


class _Cache:
    """The encoded payload, rebuilt only when a run's files changed."""

    def __init__(self, run_dirs: list[str], samples_per_step: int) -> None:
        self.run_dirs, self.samples_per_step = run_dirs, samples_per_step
        self.lock = threading.Lock()
        self.etag, self.body = "", b""

    def current(self) -> tuple[str, bytes]:
        with self.lock:
            etag = _fingerprint(self.run_dirs)
            if etag != self.etag:
                runs = [load_run(path) for path in self.run_dirs]
                self.body = encode_payload(report_payload(runs, self.samples_per_step)).encode("ascii")
                self.etag = etag
            return self.etag, self.body


def _fingerprint(run_dirs: list[str]) -> str:
    """Sizes and modification times of every file a report reads."""
    digest = hashlib.sha256()
    for run in map(Path, run_dirs):
        rollouts = run / "rollouts"
        files = [
            run / "config.yaml",
            run / "metrics.jsonl",
            *(sorted(rollouts.iterdir()) if rollouts.is_dir() else []),
        ]
        for file in files:
            if file.exists():
                stat = file.stat()
                digest.update(f"{file}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return '"' + digest.hexdigest()[:32] + '"'
