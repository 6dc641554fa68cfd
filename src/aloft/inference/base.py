"""The ``InferenceEngine`` protocol every engine implements, and the engine registry (docs/reference/design.md §3).

This module is torch-free on purpose: the rollout package depends on the protocol only, and must not
pull in torch or any concrete engine. Engines register under a backend name with ``@register_engine``;
``make_engine("hf", ...)`` imports the built-in ones on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from aloft.registry import register
from aloft.types import Completion, GenerationRequest

WeightsSource = Iterable[tuple[str, Any]] | Mapping[str, Any] | str
"""Named tensors (``(name, torch.Tensor)`` pairs or a ``{name: tensor}`` mapping) following the HF
model's ``state_dict`` names, or the path of a directory (or single file) of HF safetensors weights."""


def supports_lora_sync(engine: Any) -> bool:
    """Whether ``engine`` takes adapter-only weight syncs (``update_lora(adapters, version)``)."""
    return callable(getattr(engine, "update_lora", None))


async def end_sessions(engine: Any, session_ids: list[str]) -> None:
    """Tell ``engine`` the sessions made their last request, where it keeps state per session.

    An engine may define ``async end_sessions(session_ids)``: the hf engine frees the KV cache it
    kept for the sessions' next turns, the remote engine forgets their server pins and passes the
    call on to ``aloft serve``. vLLM and SGLang need nothing: their prefix caches are blocks of a
    pool sized once, which finished requests return for reuse. Each id also covers the per-sample
    sessions ``<id>/<k>`` a server makes of an ``n > 1`` request.
    """
    end = getattr(engine, "end_sessions", None)
    if callable(end) and session_ids:
        await end(session_ids)


@runtime_checkable
class InferenceEngine(Protocol):
    """Token-in / token-out generation with weight sync, for rollouts.

    - ``generate`` returns one ``Completion`` per request, in request order. Its ``logprobs`` are
      the sampler logprobs: for each generated token, ``log_softmax(logits / T)`` with T the request's
      temperature (1 when greedy), taken before top-k / top-p truncation.
    - ``update_weights`` loads new weights and sets ``version``; completions carry the version that
      produced them.
    - ``pause``/``resume`` hold new work back (in-flight weight updates); ``sleep``/``wake_up`` free
      memory when trainer and engine share a device.
    """

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded."""
        ...

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]: ...

    async def update_weights(self, weights: WeightsSource, version: int) -> None: ...

    async def sleep(self) -> None: ...

    async def wake_up(self) -> None: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    def close(self) -> None: ...


_ENGINES: dict[str, Callable[..., InferenceEngine]] = {}

_BUILTIN_ENGINE_MODULES = {
    "hf": "aloft.inference.hf",
    "scripted": "aloft.inference.scripted",
    "remote": "aloft.inference.remote",
    "vllm": "aloft.inference.vllm_engine",
    "sglang": "aloft.inference.sglang_engine",
}
"""Backends that ship with aloft, imported on first use so this module stays light (and torch-free)."""


def register_engine(name: str) -> Callable[[Callable[..., InferenceEngine]], Callable[..., InferenceEngine]]:
    """Class decorator: make an engine constructible with ``make_engine(name, **kwargs)``."""
    return register(_ENGINES, "inference engine", "register_engine", name)


def registered_engines() -> list[str]:
    """Names ``make_engine`` accepts: registered engines plus built-ins not imported yet."""
    return sorted(set(_ENGINES) | set(_BUILTIN_ENGINE_MODULES))


def make_engine(backend: str, **kwargs: Any) -> InferenceEngine:
    """Construct the engine registered as ``backend`` with ``kwargs`` (e.g. ``make_engine("hf", model_or_path=...)``)."""
    if backend not in _ENGINES and backend in _BUILTIN_ENGINE_MODULES:
        # importlib (not an import statement) keeps the protocol module free of a static dependency
        # on concrete engines, which the import-linter contracts forbid for rollout.
        importlib.import_module(_BUILTIN_ENGINE_MODULES[backend])
    if backend not in _ENGINES:
        raise ValueError(
            f"unknown inference backend {backend!r}; known backends: {', '.join(registered_engines())}"
        )
    return _ENGINES[backend](**kwargs)
