"""The one thread that runs aloft's torch compute in a process.

OpenMP gives every thread that runs parallel torch ops its own team of worker threads. With few
cores, two teams (training on the main thread, generation on an engine's thread) slow each other
down: on a 2-core Xeon the hf engine decoded 2.1x slower once the main thread had run a parallel
op, and at full speed again once every torch op ran on the same thread. So the embedded engine
and the trainer's update both run here; the event loop and env threads stay free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["on_compute_thread", "compute_executor"]

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_thread_ident: int | None = None


def compute_executor() -> ThreadPoolExecutor:
    """The process-wide single-worker executor for torch compute (created on first use; never shut down)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="aloft-compute", initializer=_remember_thread
            )
        return _executor


def on_compute_thread(function: Callable[..., T], *args: object) -> T:
    """Run ``function(*args)`` on the compute thread and return its result (inline if already there)."""
    if threading.get_ident() == _thread_ident:
        return function(*args)
    return compute_executor().submit(function, *args).result()


def _remember_thread() -> None:
    global _thread_ident
    _thread_ident = threading.get_ident()
