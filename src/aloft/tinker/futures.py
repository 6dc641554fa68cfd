"""Tinker's futures: every operation is accepted at once with a ``request_id`` and its result is
fetched with ``retrieve_future``, which this table answers by long-polling.

The SDK re-polls at once, with no sleep, whenever the answer is "try again", so a pending future is
held server-side for ``hold_s`` (``HOLD_S``) before saying so. Results stay for ``keep_s`` after they are ready:
the SDK may fetch one twice (a lost connection). Work runs on aloft's compute thread in the order it
was accepted, which is the order Tinker's per-client ``seq_id`` s promise.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aloft.models.compute_thread import compute_executor
from aloft.tinker.errors import TinkerNotFoundError, TinkerUserError

log = logging.getLogger(__name__)

HOLD_S = 40.0
"""Seconds a ``retrieve_future`` waits for a pending result: under the SDK's 45 s read timeout, and
long enough that a CPU step (a minute) costs a poll or two, each of which the SDK logs as a warning."""


@dataclass(kw_only=True)
class Outcome:
    """A finished operation: a JSON object, protobuf bytes, or a failure with its category."""

    json: dict[str, Any] | None = None
    proto: bytes | None = None
    error: str | None = None
    category: str = "server"


@dataclass(kw_only=True)
class _Entry:
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: Outcome | None = None
    finished_at: float = 0.0


class FutureTable:
    def __init__(self, *, hold_s: float = HOLD_S, keep_s: float = 600.0) -> None:
        self.hold_s = hold_s
        self.keep_s = keep_s
        self._entries: dict[str, _Entry] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()  # running async work, kept from the collector

    def submit(self, work: Callable[[], dict[str, Any] | bytes]) -> str:
        """Queue ``work`` (run on the compute thread; returns a JSON object or protobuf bytes) and
        return its request id. Must be called on the server's event loop."""
        self._forget_old()
        request_id = f"req-{next(self._ids)}"
        entry = _Entry()
        self._entries[request_id] = entry
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(compute_executor(), work)
        job.add_done_callback(lambda finished: self._finish(entry, finished))
        return request_id

    def submit_async(self, work: Callable[[], Awaitable[dict[str, Any] | bytes]]) -> str:
        """Like ``submit`` for work that runs on the event loop (sampling: the engine batches it)."""
        self._forget_old()
        request_id = f"req-{next(self._ids)}"
        entry = _Entry()
        self._entries[request_id] = entry
        task = asyncio.get_running_loop().create_task(work())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda finished: self._finish(entry, finished))
        return request_id

    def _finish(self, entry: _Entry, job: asyncio.Future[Any]) -> None:
        error = job.exception()
        if error is None:
            result = job.result()
            entry.outcome = Outcome(proto=result) if isinstance(result, bytes) else Outcome(json=result)
        elif isinstance(error, (TinkerUserError, TinkerNotFoundError)):
            entry.outcome = Outcome(error=str(error), category="user")
        else:
            log.error("tinker operation failed", exc_info=error)
            entry.outcome = Outcome(error=f"{type(error).__name__}: {error}", category="server")
        entry.finished_at = time.monotonic()
        entry.done.set()

    async def retrieve(self, request_id: str) -> Outcome | None:
        """The outcome, or None when still pending after ``hold_s``; unknown ids raise."""
        entry = self._entries.get(request_id)
        if entry is None:
            raise TinkerNotFoundError(
                f"no future {request_id!r} on this server (finished too long ago, or never made)"
            )
        try:
            await asyncio.wait_for(entry.done.wait(), self.hold_s)
        except TimeoutError:
            return None
        return entry.outcome

    def _forget_old(self) -> None:
        horizon = time.monotonic() - self.keep_s
        for request_id in [
            rid for rid, e in self._entries.items() if e.done.is_set() and e.finished_at < horizon
        ]:
            del self._entries[request_id]
