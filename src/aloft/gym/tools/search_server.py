"""aloft's Search-R1-style retrieval server, for any corpus (BM25 via ``LocalIndex``).

    python -m aloft.gym.tools.search_server --corpus corpus.jsonl --port 8000
    python -m aloft.gym.tools.search_server --index-dir saved_index/ --host 127.0.0.1 --port 0

It binds to 127.0.0.1 unless ``--host`` says otherwise, and prints one line once it is ready::

    aloft search server: 12002 documents, listening on http://127.0.0.1:8000/retrieve

Endpoints (the request and response shapes of Search-R1's ``retrieval_server.py``):

- ``POST /retrieve`` with ``{"queries": ["..."], "topk": 3, "return_scores": true}`` answers
  ``{"result": [[{"document": {"id", "contents", "title", "text"}, "score": 7.1}, ...], ...]}``, one
  list per query (without ``return_scores``: lists of documents). ``contents`` is the title, a
  newline and the text, as in Search-R1's corpora. ``topk`` defaults to ``--topk``.
- ``GET /health`` answers ``{"status": "ok", "documents": N}``.

A malformed request gets HTTP 400 with ``{"error": "..."}``. Built on the standard library's
``ThreadingHTTPServer`` (one thread per connection), which is enough for a BM25 index; for heavier
retrievers put any server speaking the same protocol behind ``RetrievalClient``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aloft.gym.tools.search import Hit, LocalIndex, SearchBackend, local_index

__all__ = ["SearchServer", "main", "make_server"]

MAX_BODY_BYTES = 1 << 20
MAX_QUERIES = 1024


def _document(hit: Hit) -> dict[str, Any]:
    return {"id": hit.id, "contents": hit.contents(), "title": hit.title, "text": hit.text}


def _parse_request(body: Any, default_topk: int, max_topk: int) -> tuple[list[str], int, bool]:
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    queries = body.get("queries")
    if queries is None and isinstance(body.get("query"), str):  # skyrl-gym's search tool: one query
        queries = [body["query"]]
    if not isinstance(queries, list) or not all(isinstance(query, str) for query in queries):
        raise ValueError("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = body.get("topk")
    if isinstance(topk, list) and len(topk) == 1:  # some Search-R1 scripts send [k]
        topk = topk[0]
    if topk is None or topk == 0:
        topk = default_topk
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise ValueError(f"'topk' must be a positive integer, got {topk!r}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise ValueError("'return_scores' must be true or false")
    return queries, min(topk, max_topk), return_scores


def make_server(
    backend: SearchBackend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    default_topk: int = 3,
    max_topk: int = 100,
    documents: int | None = None,
    verbose: bool = False,
) -> ThreadingHTTPServer:
    """An HTTP server answering ``/retrieve`` and ``/health`` from ``backend`` (not started yet:
    call ``serve_forever``, or use ``SearchServer``). ``port=0`` picks a free port."""
    document_count = (
        documents if documents is not None else len(backend) if hasattr(backend, "__len__") else -1
    )

    class Handler(BaseHTTPRequestHandler):
        server_version = "aloft-search"
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._reply(HTTPStatus.OK, {"status": "ok", "documents": document_count})
            else:
                self._reply(
                    HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; use POST /retrieve"}
                )

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self._reply(
                    HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; use POST /retrieve"}
                )
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY_BYTES:
                self.close_connection = True
                self._reply(
                    HTTPStatus.BAD_REQUEST, {"error": f"need a JSON body of 1 to {MAX_BODY_BYTES} bytes"}
                )
                return
            try:
                body = json.loads(self.rfile.read(length).decode("utf-8"))
                queries, topk, return_scores = _parse_request(body, default_topk, max_topk)
            except (UnicodeDecodeError, json.JSONDecodeError):
                self._reply(HTTPStatus.BAD_REQUEST, {"error": "the request body is not valid JSON"})
                return
            except ValueError as error:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
                return
            try:
                results = backend.batch_search(queries, topk)
            except Exception as error:  # keep serving; tell the client what broke
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(error).__name__}: {error}"})
                return
            if return_scores:
                payload = [
                    [{"document": _document(hit), "score": hit.score} for hit in hits] for hits in results
                ]
            else:
                payload = [[_document(hit) for hit in hits] for hits in results]
            self._reply(HTTPStatus.OK, {"result": payload})

        def log_message(self, format: str, *args: Any) -> None:
            if verbose:
                super().log_message(format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


class SearchServer:
    """``make_server`` run on a background thread of this process: ``start()``, ``url``, ``stop()``.

    Usable as a context manager. For a separate process, run the module instead (``main``).
    """

    def __init__(
        self, backend: SearchBackend, host: str = "127.0.0.1", port: int = 0, **options: Any
    ) -> None:
        self._server = make_server(backend, host, port, **options)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``/retrieve`` URL (with the real port when it was 0)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def start(self) -> SearchServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="aloft-search-server", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SearchServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aloft.gym.tools.search_server",
        description="Serve a corpus over Search-R1's retrieval protocol (POST /retrieve), with BM25.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--corpus", help="corpus file: JSON lines {id, title, text} or {id, contents}, may be .gz"
    )
    source.add_argument("--index-dir", help="a directory written by LocalIndex.save()")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (0 picks a free one; default 8000)")
    parser.add_argument("--topk", type=int, default=3, help="results per query when a request gives no topk")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)

    try:
        index: LocalIndex = (
            local_index(corpus_path=args.corpus) if args.corpus else local_index(index_dir=args.index_dir)
        )
    except (FileNotFoundError, ValueError, ImportError) as error:
        print(f"aloft search server: {error}", file=sys.stderr)
        return 2
    try:
        server = make_server(index, args.host, args.port, default_topk=args.topk, verbose=args.verbose)
    except OSError as error:
        print(f"aloft search server: cannot bind {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2

    def _stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    host, port = server.server_address[:2]
    print(
        f"aloft search server: {len(index)} documents, listening on http://{host}:{port}/retrieve", flush=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
