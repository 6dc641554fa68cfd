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
"""

from __future__ import annotations

from collections import OrderedDict
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
    """Segments and histories of finished rows, least recently used first out beyond ``max_bytes``."""

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

    def __len__(self) -> int:
        return len(self.segments) + len(self.histories)

    def add_segment(self, tokens: tuple[int, ...], segment: CachedSegment) -> None:
        self._drop(self.segments, tokens)
        self.segments[tokens] = segment
        self.nbytes += segment.nbytes
        self._evict()

    def add_history(self, history: CachedHistory) -> None:
        key = history.segment + history.tokens
        self._drop(self.histories, key)
        self.histories[key] = history
        self.nbytes += history.nbytes
        self._evict()

    def take_history(self, prompt: list[int], segments: set[tuple[int, ...]]) -> CachedHistory | None:
        """Remove and return the longest history that ``prompt`` continues (with new tokens after it).

        Only histories whose segment is in ``segments`` (cached or live) count.
        """
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
        history = self.histories.pop(best)
        self.nbytes -= history.nbytes
        return history

    def segment(self, tokens: tuple[int, ...]) -> CachedSegment | None:
        segment = self.segments.get(tokens)
        if segment is not None:
            self.segments.move_to_end(tokens)
        return segment

    def clear(self) -> None:
        self.segments.clear()
        self.histories.clear()
        self.nbytes = 0

    def _drop(self, table: OrderedDict, key: tuple[int, ...]) -> None:
        old = table.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes

    def _evict(self) -> None:
        # Histories go first (each serves one trajectory), then segments (a group's prompt).
        for table in (self.histories, self.segments):
            while self.nbytes > self.max_bytes and table:
                _, entry = table.popitem(last=False)
                self.nbytes -= entry.nbytes
