"""``RequestBatcher``: gathers many callers' ``generate`` requests into batches run on one worker thread.

In-process engines (``hf``, ``vllm``) share it. Many rollout coroutines each ``await
batcher.submit([request])``; requests go into a queue, and one background task per event loop takes up
to ``max_batch_size`` of them, runs ``run_batch(requests, seeds)`` on the engine's executor (so the
event loop stays free for environments and tools) and resolves each caller's future. Requests that
arrive while a batch runs form the next batch.

With ``run_continuous`` instead of ``run_batch`` the engine batches continuously: it pulls queued
requests into the running batch whenever it has room (``take``) and hands each completion back as
soon as its row finishes (``deliver``), so requests that arrive while others decode join them instead
of waiting for the whole batch to end.

Work the engine must not interleave with a batch (a weight update, freeing memory) goes through
``run_exclusive`` on the same single-thread executor, so it never lands in the middle of a batch (a
continuous batch stops admitting and drains first). ``hold``/``release`` keep new batches from starting
(pause, sleep) while requests keep queueing.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from aloft.types import Completion, GenerationRequest

T = TypeVar("T")

RunBatch = Callable[[list[GenerationRequest], list[int]], list[Completion]]
"""``(requests, seeds) -> completions`` (same order), called on the executor's thread."""

Take = Callable[[int], list[tuple[GenerationRequest, int, Any]]]
"""``take(n)``: up to n queued ``(request, seed, handle)`` (none while a hold is in place); thread-safe."""
Deliver = Callable[[Any, Completion], None]
"""``deliver(handle, completion)``: hand a finished completion to its caller; thread-safe."""
RunContinuous = Callable[[Take, Deliver], None]
"""Decode until nothing is running and ``take`` gives nothing more, on the executor's thread."""


@dataclass
class _Pending:
    request: GenerationRequest
    seed: int
    future: asyncio.Future[Completion]


class _LoopState:
    """Queue and batcher task bound to one event loop (an engine may outlive several ``asyncio.run``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, held: bool) -> None:
        self.loop = loop
        self.pending: deque[_Pending] = deque()
        self.task: asyncio.Task[None] | None = None
        self.unheld = asyncio.Event()
        """Set while no hold (pause, sleep) is in place."""
        self.idle = asyncio.Event()
        """Set while no batch is running."""
        self.idle.set()
        if not held:
            self.unheld.set()


class RequestBatcher:
    """Queue requests, run them in batches on ``executor``, hold batches back on request.

    Args:
        run_batch: runs one batch on the executor's thread.
        executor: a single-thread executor (the engine's only thread that touches the model).
        name: the engine's name, for error messages.
        max_batch_size: most requests per batch.
        batch_wait_s: how long the batcher lets callers gather before starting a batch.
        seed: seeds the RNG that draws a sampling seed for each request without one, so a run's
            samples are reproducible from the engine seed alone.
    """

    def __init__(
        self,
        run_batch: RunBatch | None,
        executor: Executor,
        *,
        name: str,
        max_batch_size: int,
        batch_wait_s: float,
        seed: int,
        run_continuous: RunContinuous | None = None,
    ) -> None:
        if (run_batch is None) == (run_continuous is None):
            raise ValueError(f"{name}: give exactly one of run_batch and run_continuous")
        if max_batch_size < 1:
            raise ValueError(f"{name}: max_batch_size must be >= 1, got {max_batch_size}")
        self._run_batch = run_batch
        self._run_continuous = run_continuous
        self.executor = executor
        self.name = name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self._rng = random.Random(seed)
        self._holds: set[str] = set()
        self._state: _LoopState | None = None
        self._closed = False

    async def submit(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Queue the requests and wait for all their completions (same order)."""
        if self._closed:
            raise RuntimeError(f"{self.name} is closed; build a new engine")
        if self.is_held("sleep"):
            raise RuntimeError(f"{self.name} is asleep; call `await engine.wake_up()` before generate")
        state = self._loop_state()
        futures = []
        for request in requests:
            seed = request.sampling.seed if request.sampling.seed is not None else self._rng.getrandbits(63)
            future: asyncio.Future[Completion] = state.loop.create_future()
            state.pending.append(_Pending(request=request, seed=seed, future=future))
            futures.append(future)
        if futures and (state.task is None or state.task.done()):
            state.task = state.loop.create_task(self._run(state))
        return list(await asyncio.gather(*futures))

    async def hold(self, reason: str) -> None:
        """Start no new batch until ``release(reason)``; returns once the batch in flight is done."""
        self._holds.add(reason)
        state = self._loop_state()
        state.unheld.clear()
        await state.idle.wait()

    def release(self, reason: str) -> None:
        self._holds.discard(reason)
        if self._state is not None and not self._holds:
            self._state.unheld.set()

    def is_held(self, reason: str) -> bool:
        return reason in self._holds

    async def run_exclusive(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the executor, between batches (never inside one)."""
        reason = f"exclusive-{id(fn)}-{random.random()}"
        self._holds.add(reason)  # a continuous batch stops admitting, drains and returns the thread
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, functools.partial(fn, *args))
        finally:
            self.release(reason)

    def close(self) -> None:
        """Fail queued requests (a batch in flight runs to its end); the batcher's task then ends."""
        if self._closed:
            return
        self._closed = True
        state, self._state = self._state, None
        if state is not None and not state.loop.is_closed():
            error = RuntimeError(f"{self.name} was closed while this request was queued")
            for pending in state.pending:
                state.loop.call_soon_threadsafe(_fail, pending.future, error)
            state.pending.clear()
            # Wake a batcher task waiting for a hold's release (pause, sleep): with its queue empty
            # it returns, instead of waiting for good and being destroyed pending with its loop.
            state.loop.call_soon_threadsafe(state.unheld.set)

    # ------------------------------------------------------------------------------------------------

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop, held=bool(self._holds))
        return self._state

    async def _run(self, state: _LoopState) -> None:
        """Run batches until the queue is empty, then exit (the next ``submit`` starts a new task)."""
        while True:
            # Let callers scheduled alongside the current ones enqueue, so they share this batch.
            for _ in range(3):
                await asyncio.sleep(0)
            if self.batch_wait_s > 0 and len(state.pending) < self.max_batch_size:
                await asyncio.sleep(self.batch_wait_s)
            await state.unheld.wait()
            batch: list[_Pending] = []
            while state.pending and len(batch) < self.max_batch_size:
                pending = state.pending.popleft()
                if not pending.future.done():  # skip callers that were cancelled
                    batch.append(pending)
            if not batch:
                if not state.pending:
                    return
                continue
            state.idle.clear()
            try:
                if self._run_continuous is not None:
                    await self._continue(state, batch)
                else:
                    await self._one_batch(state, batch)
            finally:
                state.idle.set()

    async def _one_batch(self, state: _LoopState, batch: list[_Pending]) -> None:
        try:
            completions = await state.loop.run_in_executor(
                self.executor,
                functools.partial(self._run_batch, [p.request for p in batch], [p.seed for p in batch]),
            )
        except BaseException as error:
            _fail_all(batch, error, self.name)
            if not isinstance(error, Exception):
                raise
        else:
            for pending, completion in zip(batch, completions):
                if not pending.future.done():
                    pending.future.set_result(completion)

    async def _continue(self, state: _LoopState, first: list[_Pending]) -> None:
        """One continuous run: ``first`` plus whatever arrives while it decodes (until a hold)."""
        admitted: dict[int, _Pending] = {}
        handed = list(first)

        def take(n: int) -> list[tuple[GenerationRequest, int, Any]]:  # executor thread
            taken = handed[:n]
            del handed[:n]
            while len(taken) < n and state.pending and not self._holds:
                pending = state.pending.popleft()  # deque ops are atomic: safe beside the loop's appends
                if not pending.future.done():
                    taken.append(pending)
            for pending in taken:
                admitted[id(pending)] = pending
            return [(p.request, p.seed, id(p)) for p in taken]

        def deliver(handle: Any, completion: Completion) -> None:  # executor thread
            pending = admitted.pop(handle)
            state.loop.call_soon_threadsafe(_resolve, pending.future, completion)

        try:
            await state.loop.run_in_executor(
                self.executor, functools.partial(self._run_continuous, take, deliver)
            )
        except BaseException as error:
            _fail_all([*admitted.values(), *handed], error, self.name)
            if not isinstance(error, Exception):
                raise
        else:
            state.pending.extendleft(reversed(handed))  # given to a run that ended before taking them


def check_prompt(request: GenerationRequest, vocab_size: int, context_length: int) -> None:
    """One-line ``ValueError`` for a prompt an engine cannot run: empty, foreign ids, or no room left."""
    ids = request.prompt_ids
    if not ids:
        raise ValueError("GenerationRequest.prompt_ids is empty; give at least one prompt token")
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise ValueError(
            f"GenerationRequest.prompt_ids holds ids outside [0, {vocab_size}); tokenize with this engine's tokenizer"
        )
    if len(ids) >= context_length:
        raise ValueError(
            f"prompt of {len(ids)} tokens leaves no room in the model's context of {context_length}; "
            "shorten the prompt"
        )


def _fail_all(batch: list[_Pending], error: BaseException, name: str) -> None:
    """A failing batch fails its own callers, not the engine; cancellation (loop shutdown, close())
    must not leave them waiting forever either."""
    reason = error if isinstance(error, Exception) else RuntimeError(f"{name} batch was cancelled")
    for pending in batch:
        _fail(pending.future, reason)


def _resolve(future: asyncio.Future[Completion], completion: Completion) -> None:
    if not future.done():
        future.set_result(completion)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
