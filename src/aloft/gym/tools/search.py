"""Search tools: BM25 over a local corpus, a Search-R1 retrieval client, and the ``search`` tool group.

Two interchangeable backends, both with ``search(query, topk) -> list[Hit]`` and ``batch_search``:

- ``LocalIndex(documents)``: BM25 (Okapi, via the ``bm25s`` library: ``pip install bm25s``) over
  ``{"id", "title", "text"}`` documents, in this process. ``save(dir)`` / ``LocalIndex.load(dir)``
  keep a built index; ``LocalIndex.from_jsonl(path)`` reads a corpus file; ``local_index(...)``
  builds or loads one once per process and shares it between envs.
- ``RetrievalClient(url)``: a client of a Search-R1-style retrieval server, so a large index can live
  on another machine. It sends ``POST /retrieve`` with ``{"queries": [...], "topk": k,
  "return_scores": true}`` and reads ``{"result": [[{"document": {"id", "contents"}, "score"}, ...],
  ...]}``, where ``contents`` is the title, a newline, and the text (Search-R1's corpus format).
  ``python -m aloft.gym.tools.search_server --corpus FILE.jsonl`` serves any corpus that way.

Corpus files are JSON lines (optionally gzipped): ``{"id", "title", "text"}`` or Search-R1's
``{"id", "contents"}``.

``SearchTools(backend)`` is the reusable tool group: one tool, ``search(query, topk=3)``, whose output
renders the hits as Search-R1 does: ``Doc 1(Title: ...) text`` one per line.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from aloft.gym.tools.base import ToolError, ToolGroup, tool
from aloft.types import InfrastructureError

__all__ = [
    "Hit",
    "LocalIndex",
    "RetrievalClient",
    "RetrievalError",
    "SearchBackend",
    "SearchTools",
    "document_from_row",
    "local_index",
    "read_corpus",
    "render_hits",
]

INDEX_FORMAT = "aloft-bm25s-1"
_INDEX_META = "aloft_index.json"
_INDEX_DOCUMENTS = "documents.jsonl"


@dataclass(frozen=True)
class Hit:
    """One retrieved document and its score (higher is better)."""

    id: str
    title: str
    text: str
    score: float

    def contents(self) -> str:
        """Search-R1's ``contents``: the title, a newline, the text."""
        return f"{self.title}\n{self.text}"


class SearchBackend(Protocol):
    """What ``SearchTools`` needs: a ``LocalIndex``, a ``RetrievalClient`` or anything alike."""

    def search(self, query: str, topk: int = 3) -> list[Hit]: ...

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]: ...


class RetrievalError(InfrastructureError):
    """A retrieval server could not be reached or answered something unusable (an infrastructure
    failure: the search tool's call raises it and the trajectory fails, never a reward)."""


# ---------------------------------------------------------------------------------------------------
# Corpus files


def document_from_row(row: Mapping[str, Any], fallback_id: str) -> dict[str, str]:
    """``{"id", "title", "text"}`` from a corpus row in aloft's or Search-R1's format.

    ``{"id", "title", "text"}`` is taken as is; ``{"id", "contents"}`` is split at its first newline
    into title and text. A row without an id gets ``fallback_id``.
    """
    if not isinstance(row, Mapping):
        raise ValueError(f"a corpus row must be a JSON object, got {type(row).__name__}")
    document_id = row.get("id", row.get("_id"))
    document_id = fallback_id if document_id is None else str(document_id)
    if "contents" in row and "text" not in row:
        contents = str(row["contents"] or "")
        title, _, text = contents.partition("\n")
        return {"id": document_id, "title": title.strip(), "text": text.strip()}
    if "text" not in row:
        raise ValueError(f"corpus row {document_id!r} has neither 'text' nor 'contents'")
    return {"id": document_id, "title": str(row.get("title") or ""), "text": str(row["text"] or "")}


def read_corpus(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The documents of a ``.jsonl`` or ``.jsonl.gz`` corpus file (see ``document_from_row``)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"corpus file {file} does not exist")
    opener = gzip.open if file.name.endswith(".gz") else open
    documents = []
    with opener(file, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                documents.append(document_from_row(json.loads(line), fallback_id=str(len(documents))))
            except (json.JSONDecodeError, ValueError) as error:
                raise ValueError(f"{file} line {line_number}: {error}") from None
    if not documents:
        raise ValueError(f"corpus file {file} has no documents")
    return documents


# ---------------------------------------------------------------------------------------------------
# BM25 over a local corpus


def _bm25s() -> Any:
    try:
        import bm25s
    except ImportError:
        raise ImportError("the local search index needs the bm25s package: pip install bm25s") from None
    return bm25s


def _tokenize(texts: list[str]) -> list[list[str]]:
    return _bm25s().tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


class LocalIndex:
    """BM25 over documents ``{"id", "title", "text"}`` (title and text are both indexed).

    ``k1`` and ``b`` are the usual BM25 parameters. Queries are lower-cased, tokenized on words and
    stripped of English stop words, like the documents. Thread-safe for searching.
    """

    def __init__(self, documents: Iterable[Mapping[str, Any]], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.documents: list[dict[str, str]] = [
            document_from_row(document, fallback_id=str(position))
            for position, document in enumerate(documents)
        ]
        if not self.documents:
            raise ValueError("LocalIndex needs at least one document")
        ids = [document["id"] for document in self.documents]
        if len(set(ids)) != len(ids):
            duplicate = next(identifier for identifier in ids if ids.count(identifier) > 1)
            raise ValueError(
                f"LocalIndex: document id {duplicate!r} appears more than once; ids must be unique"
            )
        self.k1, self.b = float(k1), float(b)
        bm25s = _bm25s()
        self._retriever = bm25s.BM25(k1=self.k1, b=self.b)
        corpus_tokens = _tokenize([f"{document['title']} {document['text']}" for document in self.documents])
        self._retriever.index(corpus_tokens, show_progress=False)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str], **options: float) -> LocalIndex:
        """Index the documents of a corpus file (see ``read_corpus``)."""
        return cls(read_corpus(path), **options)

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        """The ``topk`` best documents for ``query``, best first; documents that share no word
        with the query are never returned (so the list may be shorter, or empty)."""
        return self.batch_search([query], topk)[0]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        """``search`` for several queries at once."""
        if isinstance(queries, str):
            raise TypeError("batch_search takes a list of queries; use search() for one")
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be a positive integer, got {topk!r}")
        if not queries:
            return []
        k = min(topk, len(self.documents))
        tokens = _tokenize([str(query) for query in queries])
        results: list[list[Hit]] = []
        for query_tokens in tokens:
            if not query_tokens:
                results.append([])
                continue
            positions, scores = self._retriever.retrieve(
                [query_tokens], k=k, show_progress=False, n_threads=0
            )
            hits = []
            for position, score in zip(positions[0].tolist(), scores[0].tolist()):
                if score > 0 and math.isfinite(score):
                    document = self.documents[position]
                    hits.append(Hit(document["id"], document["title"], document["text"], float(score)))
            results.append(hits)
        return results

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the index and its documents to ``directory`` (created if needed); return it."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        self._retriever.save(str(target), show_progress=False)
        with open(target / _INDEX_DOCUMENTS, "w", encoding="utf-8") as handle:
            for document in self.documents:
                handle.write(json.dumps(document, ensure_ascii=False) + "\n")
        meta = {"format": INDEX_FORMAT, "documents": len(self.documents), "k1": self.k1, "b": self.b}
        (target / _INDEX_META).write_text(json.dumps(meta) + "\n", encoding="utf-8")
        return target

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> LocalIndex:
        """Load an index written by ``save``."""
        source = Path(directory)
        meta_path = source / _INDEX_META
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{source} is not a saved LocalIndex (no {_INDEX_META}); build one with save()"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(
                f"{source}: index format {meta.get('format')!r} is not {INDEX_FORMAT!r}; rebuild it"
            )
        index = cls.__new__(cls)
        index.documents = read_corpus(source / _INDEX_DOCUMENTS)
        index.k1, index.b = float(meta["k1"]), float(meta["b"])
        index._retriever = _bm25s().BM25.load(str(source), load_corpus=False, show_progress=False)
        if len(index.documents) != meta["documents"] or index._retriever.scores["num_docs"] != len(
            index.documents
        ):
            raise ValueError(
                f"{source}: the index and its documents.jsonl disagree on the document count; rebuild it"
            )
        return index


_INDEX_CACHE: dict[tuple[str, str, int, int], LocalIndex] = {}
_INDEX_CACHE_LOCK = threading.Lock()


def local_index(
    *, corpus_path: str | os.PathLike[str] | None = None, index_dir: str | os.PathLike[str] | None = None
) -> LocalIndex:
    """A ``LocalIndex`` loaded from ``index_dir`` or built from ``corpus_path``, cached per process.

    Envs call this on construction, so the index is built once per process and shared (a changed
    file, by size or modification time, is reloaded).
    """
    if (corpus_path is None) == (index_dir is None):
        raise ValueError("local_index needs exactly one of corpus_path and index_dir")
    kind = "index" if index_dir is not None else "corpus"
    path = Path(index_dir if index_dir is not None else corpus_path).resolve()  # type: ignore[arg-type]
    stat_path = path / _INDEX_META if kind == "index" else path
    try:
        stat = stat_path.stat()
    except FileNotFoundError:
        what = "saved index directory" if kind == "index" else "corpus file"
        raise FileNotFoundError(f"search {what} {path} does not exist") from None
    key = (kind, str(path), stat.st_size, stat.st_mtime_ns)
    with _INDEX_CACHE_LOCK:
        index = _INDEX_CACHE.get(key)
        if index is None:
            index = LocalIndex.load(path) if kind == "index" else LocalIndex.from_jsonl(path)
            _INDEX_CACHE[key] = index
        return index


# ---------------------------------------------------------------------------------------------------
# A Search-R1 retrieval client


class RetrievalClient:
    """Client of a Search-R1-style retrieval server (``POST /retrieve``).

    ``url`` is the server's base URL (``http://host:8000``) or its full ``/retrieve`` URL. A request
    that fails to connect is retried ``retries`` times; a server error is not.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 1) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"retrieval url must start with http:// or https://, got {url!r}")
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)

    def __repr__(self) -> str:
        return f"RetrievalClient({self.url!r})"

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        """The server's ``topk`` hits for ``query``."""
        return self.batch_search([query], topk)[0]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        """One request for several queries; one list of hits per query, in order."""
        if isinstance(queries, str):
            raise TypeError("batch_search takes a list of queries; use search() for one")
        if not queries:
            return []
        payload = {"queries": [str(query) for query in queries], "topk": int(topk), "return_scores": True}
        body = self._post(payload)
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(
                f"retrieval server {self.url} answered without a 'result' list of {len(queries)} entries"
            )
        return [self._hits(entries) for entries in result]

    def _post(self, payload: dict[str, Any]) -> Any:
        data = json.dumps(payload).encode("utf-8")
        last_error: Exception | None = None
        for _attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.url, data=data, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as error:
                detail = error.read().decode("utf-8", errors="replace")[:200].strip()
                raise RetrievalError(
                    f"retrieval server {self.url} answered HTTP {error.code}: {detail}"
                ) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                last_error = error
            except json.JSONDecodeError:
                raise RetrievalError(
                    f"retrieval server {self.url} answered something that is not JSON"
                ) from None
        reason = getattr(last_error, "reason", last_error)
        raise RetrievalError(f"cannot reach retrieval server {self.url}: {reason}")

    def _hits(self, entries: Any) -> list[Hit]:
        if not isinstance(entries, list):
            raise RetrievalError(f"retrieval server {self.url}: each result must be a list of documents")
        hits = []
        for position, entry in enumerate(entries):
            # With return_scores the entries are {"document": ..., "score": ...}; without, documents.
            document = entry.get("document", entry) if isinstance(entry, dict) else entry
            score = entry.get("score", 0.0) if isinstance(entry, dict) and "document" in entry else 0.0
            try:
                parsed = document_from_row(document, fallback_id=str(position))
            except ValueError as error:
                raise RetrievalError(f"retrieval server {self.url}: {error}") from None
            hits.append(Hit(parsed["id"], parsed["title"], parsed["text"], float(score)))
        return hits


# ---------------------------------------------------------------------------------------------------
# The tool group


def render_hits(hits: Sequence[Hit], max_doc_chars: int | None = None) -> str:
    """Hits as Search-R1 shows them to the model: ``Doc 1(Title: T) text``, one line per hit.

    Texts longer than ``max_doc_chars`` are cut with "...". No hits gives "No results found."
    """
    if not hits:
        return "No results found."
    lines = []
    for number, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())
        if max_doc_chars is not None and len(text) > max_doc_chars:
            text = text[:max_doc_chars].rstrip() + "..."
        lines.append(f"Doc {number}(Title: {hit.title}) {text}")
    return "\n".join(lines)


class SearchTools(ToolGroup):
    """The ``search`` tool over a ``SearchBackend`` (a ``LocalIndex`` or a ``RetrievalClient``).

    ``max_topk`` caps what the model may ask for; ``max_doc_chars`` cuts each document's text in the
    rendered output. The model's own mistakes (an empty query) become tool errors it sees; a retrieval
    failure (``RetrievalError``, the server down or slow) is an ``InfrastructureError`` that fails the
    trajectory. Over a ``RetrievalClient`` the group's safety-net timeout defaults to above the
    client's own (its timeout times its tries, plus 5 s), so a slow server ends in the client's
    message naming the server.
    """

    name = "search"

    def __init__(
        self,
        backend: SearchBackend,
        *,
        max_topk: int = 10,
        max_doc_chars: int | None = 1000,
        max_query_chars: int = 1000,
        timeout_s: float | None | Literal["default"] = "default",
    ) -> None:
        client_timeout = getattr(backend, "timeout_s", None)
        if timeout_s == "default" and client_timeout is not None:
            timeout_s = client_timeout * (getattr(backend, "retries", 0) + 1) + 5.0
        super().__init__(timeout_s=timeout_s)
        if isinstance(max_topk, bool) or not isinstance(max_topk, int) or max_topk < 1:
            raise ValueError(f"SearchTools: max_topk must be a positive integer, got {max_topk!r}")
        self.backend = backend
        self.max_topk = max_topk
        self.max_doc_chars = max_doc_chars
        self.max_query_chars = max_query_chars

    @tool
    def search(self, query: str, topk: int = 3) -> str:
        """Search the corpus and return the best matching documents, best first.

        Args:
            query: What to look for: keywords or a question.
            topk: How many documents to return.
        """
        query = " ".join(str(query).split())[: self.max_query_chars]
        if not query:
            raise ToolError("the search query is empty; write the query between the tags")
        topk = max(1, min(int(topk), self.max_topk))
        # A RetrievalError (server down) is not the policy's doing: it goes through and fails the
        # trajectory (an InfrastructureError), rather than reaching the policy as an observation.
        return render_hits(self.backend.search(query, topk), self.max_doc_chars)
