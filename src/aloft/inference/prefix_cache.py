"""KV caches that outlive their rows: the next turn of a trajectory continues where the last one ended.

Every turn of a multi-turn episode re-sends the whole history (``prompt + completion so far +
observation``, token-in/token-out). Without reuse the engine prefills that history again every turn:
at the SQL env's 1,000-token prompts and five turns, most of an episode's compute. The hf engine
keeps, per engine and within a memory budget (least recently used out first):

- *segments*: a prompt's keys and values (shared by every row that continued it, see
  ``aloft.inference.shared_prefix``) and the logits after its last token;
- *histories*: what a finished row had cached beyond its segment (its completion but the last
  token, plus whatever it had prefilled), keyed by all of those tokens.

A new request whose prompt continues a history (or a segment) prefills only what is new. Entries are
valid for one set of weights: the engine clears the cache on every weight update and on ``sleep``.
Tensors are ``[H_kv, L, D]`` per layer (L positions).

A history belongs to the session (``GenerationRequest.session_id``) of the row that left it. A
session's last turn leaves a history too (nobody knows it is the last until the env says done), so
whoever runs the episode ends the session (``release_sessions``: the generator when an episode ends,
``aloft serve`` on ``POST /sessions/end`` or a captured session's reward): its histories go at once,
and so does each segment they continued that no other cached history continues (a segment still
decoding in the batch comes back when its last row leaves). Without that they would sit there until
least-recently-used eviction, holding memory that running rows need.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CachedSegment:
    keys: list[torch.Tensor]
    """Per layer ``[H_kv, L, D]``."""
    values: list[torch.Tensor]
    logits: torch.Tensor
    """``[V]`` next-token logits after the segment's last token."""

    @property
    def nbytes(self) -> int:
        return _nbytes(self.keys) + _nbytes(self.values) + self.logits.nbytes


@dataclass(frozen=True)
class CachedHistory:
    segment: tuple[int, ...]
    """The tokens of the segment the row continued."""
    tokens: tuple[int, ...]
    """The row's own cached tokens after the segment."""
    keys: list[torch.Tensor]
    """Per layer ``[H_kv, len(tokens), D]``."""
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return _nbytes(self.keys) + _nbytes(self.values)


def longest_prefix(prompt: list[int], candidates: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The longest of ``candidates`` that ``prompt`` starts with (or equals)."""
    best: tuple[int, ...] | None = None
    for key in candidates:
        if (
            len(prompt) >= len(key)
            and (best is None or len(key) > len(best))
            and prompt[: len(key)] == list(key)
        ):
            best = key
    return best


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.nbytes for t in tensors)


class PrefixCache:
    """Segments and histories of finished rows, least recently used first out beyond ``max_bytes``.

    The engine's compute thread reads and writes the tables; ``release_sessions`` may come from any
    thread. While the compute thread runs a batch (``in_use``) a release is queued and applied at the
    batch's next safe point (``apply_released``, between steps: never between finding an entry and
    using it); otherwise it is applied at once.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"PrefixCache: max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.segments: OrderedDict[tuple[int, ...], CachedSegment] = OrderedDict()
        self.histories: OrderedDict[tuple[int, ...], CachedHistory] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        """Requests that reused a history or a segment."""
        self.reused_tokens = 0
        """Prompt tokens not prefilled thanks to the cache (or a segment still decoding)."""
        self._history_session: dict[tuple[int, ...], str] = {}
        """History key -> the session whose row left it."""
        self._session_histories: dict[str, set[tuple[int, ...]]] = {}
        self._segment_histories: Counter[tuple[int, ...]] = Counter()
        """Segment -> how many cached histories continue it."""
        self._lock = threading.Lock()
        self._released: set[str] = set()
        self._busy = 0

    def __len__(self) -> int:
        return len(self.segments) + len(self.histories)

    def add_segment(self, tokens: tuple[int, ...], segment: CachedSegment) -> None:
        with self._lock:
            self._drop(self.segments, tokens)
            self.segments[tokens] = segment
            self.nbytes += segment.nbytes
            self._evict()

    def add_history(self, history: CachedHistory, session_id: str | None = None) -> None:
        """Keep ``history``; ``session_id``: the session it belongs to (released with it)."""
        key = history.segment + history.tokens
        with self._lock:
            self._drop(self.histories, key)
            self.histories[key] = history
            self.nbytes += history.nbytes
            self._segment_histories[history.segment] += 1
            if session_id is not None:
                self._history_session[key] = session_id
                self._session_histories.setdefault(session_id, set()).add(key)
            self._evict()

    def take_history(self, prompt: list[int], segments: set[tuple[int, ...]]) -> CachedHistory | None:
        """Remove and return the longest history that ``prompt`` continues (with new tokens after it).

        Only histories whose segment is in ``segments`` (cached or live) count.
        """
        with self._lock:
            best: tuple[int, ...] | None = None
            for key, history in self.histories.items():
                if (
                    len(prompt) > len(key)
                    and (best is None or len(key) > len(best))
                    and history.segment in segments
                    and prompt[: len(key)] == list(key)
                ):
                    best = key
            if best is None:
                return None
            return self._drop(self.histories, best)

    def segment_items(self) -> list[tuple[tuple[int, ...], CachedSegment]]:
        """The cached segments, copied under the lock (any thread may clear or release meanwhile)."""
        with self._lock:
            return list(self.segments.items())

    def segment(self, tokens: tuple[int, ...]) -> CachedSegment | None:
        with self._lock:
            segment = self.segments.get(tokens)
            if segment is not None:
                self.segments.move_to_end(tokens)
            return segment

    def clear(self) -> None:
        with self._lock:
            self.segments.clear()
            self.histories.clear()
            self.nbytes = 0
            self._history_session.clear()
            self._session_histories.clear()
            self._segment_histories.clear()
            self._released.clear()

    # ---- sessions ----------------------------------------------------------------------------
    def release_sessions(self, session_ids: Iterable[str]) -> None:
        """Drop what the sessions left (each id also covers its samples ``<id>/<k>``): their histories,
        and each segment those continued that no other cached history continues. Safe from any
        thread; applied at once unless a batch is running (then at its next safe point)."""
        with self._lock:
            self._released.update(session_ids)
            if not self._busy:
                self._apply_released()

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """Held by the compute thread while a batch runs; releases wait for ``apply_released``."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._apply_released()

    def apply_released(self) -> None:
        """Apply queued releases (the compute thread, between decode steps)."""
        if self._released:
            with self._lock:
                self._apply_released()

    def _apply_released(self) -> None:
        if not self._released:
            return
        released = self._released
        self._released = set()
        owners = [
            session
            for session in self._session_histories
            if session in released or any(session.startswith(f"{r}/") for r in released)
        ]
        continued: set[tuple[int, ...]] = set()
        for session in owners:
            for key in list(self._session_histories.get(session, ())):
                history = self._drop(self.histories, key)
                assert isinstance(history, CachedHistory)
                continued.add(history.segment)
        for segment in continued:
            if not self._segment_histories[segment]:
                self._drop(self.segments, segment)

    # ---- bookkeeping -------------------------------------------------------------------------
    def _drop(self, table: OrderedDict, key: tuple[int, ...]) -> CachedSegment | CachedHistory | None:
        """Remove ``key`` from ``table`` (the caller holds the lock), with its session records."""
        old = table.pop(key, None)
        if old is None:
            return None
        self.nbytes -= old.nbytes
        if isinstance(old, CachedHistory):
            self._segment_histories[old.segment] -= 1
            if not self._segment_histories[old.segment]:
                del self._segment_histories[old.segment]
            session = self._history_session.pop(key, None)
            if session is not None:
                keys = self._session_histories[session]
                keys.discard(key)
                if not keys:
                    del self._session_histories[session]
        return old

    def _evict(self) -> None:
        # Histories go first (each serves one trajectory), then segments (a group's prompt).
        for table in (self.histories, self.segments):
            while self.nbytes > self.max_bytes and table:
                self._drop(table, next(iter(table)))
