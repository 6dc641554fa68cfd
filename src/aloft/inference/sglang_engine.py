"""SGLang behind the ``InferenceEngine`` protocol: its native request/response format and an in-process engine.

SGLang's native ``/generate`` (and ``sglang.Engine.async_generate``, which takes the same fields) is
token-in / token-out: ``input_ids`` in; ``output_ids`` and ``meta_info.output_token_logprobs``
(``[logprob, token_id, text]`` per generated token) out. ``sglang_request`` and ``parse_sglang_output``
translate between that and aloft's ``GenerationRequest`` / ``Completion``; they are shared by
``RemoteEngine(server="sglang")`` (SGLang servers over HTTP, with its retries, balancing and sticky
sessions) and ``SGLangEngine`` (``sglang.Engine`` in this process).

Weight updates: ``update_weights_from_disk`` (a checkpoint directory the server can read) over HTTP;
``update_weights_from_tensor`` in-process. Sleep / wake use SGLang's ``release_memory_occupation`` /
``resume_memory_occupation`` (colocated training); pause / resume use ``pause_generation`` /
``continue_generation`` on servers and hold the queue in-process.

Logprobs: SGLang reports the sampled token's logprob under the distribution it sampled from
(temperature applied; after top-k / top-p when they truncate), which equals aloft's
``log_softmax(logits / T)`` for untruncated sampling, as RL rollouts use.

SGLang has no CPU build: the tests run both adapters against a loopback server (and an in-process
stand-in) that speak SGLang's API over aloft's ``hf`` engine; a GPU machine runs the real engine.
This module is torch-free (``RemoteEngine`` imports it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from aloft.inference.base import WeightsSource, register_engine
from aloft.types import Completion, GenerationRequest

__all__ = ["SGLangEngine", "parse_sglang_output", "sglang_request"]

_FINISH_REASONS = {"stop", "length", "abort"}


def sglang_request(request: GenerationRequest, seed: int | None) -> dict[str, Any]:
    """The ``/generate`` body (also ``Engine.async_generate``'s keyword arguments) for one request."""
    s = request.sampling
    sampling: dict[str, Any] = {
        "max_new_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k if s.top_k > 0 else -1,  # SGLang: -1 disables top-k
        "skip_special_tokens": False,
        "no_stop_trim": True,  # keep a matched stop string in the text, as the other engines do
    }
    if s.stop:
        sampling["stop"] = list(s.stop)
    if s.stop_token_ids:
        sampling["stop_token_ids"] = list(s.stop_token_ids)
    if seed is not None:
        sampling["sampling_seed"] = seed
    return {"input_ids": list(request.prompt_ids), "sampling_params": sampling, "return_logprob": True}


def parse_sglang_output(data: Mapping[str, Any], version: int) -> Completion:
    """One ``/generate`` result -> ``Completion``; raises ``ValueError`` on a malformed answer."""
    meta = data.get("meta_info") or {}
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise ValueError(
            "SGLang returned no meta_info.output_token_logprobs; the request needs return_logprob"
        )
    token_ids = [int(entry[1]) for entry in entries]
    logprobs = [float(entry[0]) if entry[0] is not None else 0.0 for entry in entries]
    output_ids = data.get("output_ids")
    if output_ids is not None and [int(t) for t in output_ids] != token_ids:
        raise ValueError("SGLang's output_ids and output_token_logprobs disagree")
    finish = meta.get("finish_reason") or {}
    reason = finish.get("type") if isinstance(finish, Mapping) else str(finish)
    weight_version = meta.get("weight_version")
    return Completion(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=reason if reason in _FINISH_REASONS else "length",
        text=data.get("text") or "",
        policy_version=int(weight_version) if _is_int(weight_version) else version,
    )


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


@register_engine("sglang")
class SGLangEngine:
    """Generation with ``sglang.Engine`` in this process (CUDA machines).

    Args:
        model_or_path: a HF model directory, built-in name or hub id.
        tokenizer: ignored (SGLang loads the model's own tokenizer).
        dtype: "auto", "bfloat16", "float16" or "float32".
        seed: seeds the per-request seeds drawn for requests without one.
        runtime: an already built ``sglang.Engine`` (or an object with the same methods), instead of
            building one from ``model_or_path``.
        engine_kwargs: passed to ``sglang.Engine`` (``mem_fraction_static``, ``tp_size``, ...).
    """

    def __init__(
        self,
        model_or_path: str | os.PathLike[str] | None = None,
        tokenizer: Any = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        runtime: Any = None,
        max_batch_size: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        import random

        if runtime is None:
            if model_or_path is None:
                raise ValueError("SGLangEngine needs model_or_path (or an sglang.Engine as runtime=)")
            try:
                import sglang
            except ImportError as error:
                raise ImportError(
                    "inference backend 'sglang' needs SGLang (`pip install sglang`, CUDA machines only); "
                    "on CPU use engine.backend=hf or vllm"
                ) from error
            from aloft.models.loading import resolve_model_path

            path = resolve_model_path(os.fspath(model_or_path))
            if max_batch_size is not None:
                engine_kwargs.setdefault("max_running_requests", max_batch_size)
            # ``sleep`` releases weights and KV cache through SGLang's memory saver, which must be on
            # from the start.
            engine_kwargs.setdefault("enable_memory_saver", True)
            runtime = sglang.Engine(model_path=path, dtype=dtype, random_seed=seed, **engine_kwargs)
        self.runtime = runtime
        self._rng = random.Random(seed)
        self._version = 0
        self._paused = False
        self._in_flight = 0
        self._closed = False

    @property
    def version(self) -> int:
        return self._version

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        if self._closed:
            raise RuntimeError("SGLangEngine is closed; build a new engine")
        while self._paused:  # a flag, not an asyncio.Event: the engine may outlive several event loops
            await asyncio.sleep(0.005)
        bodies = [
            sglang_request(r, r.sampling.seed if r.sampling.seed is not None else self._rng.getrandbits(63))
            for r in requests
        ]
        self._in_flight += 1
        try:
            outputs = await self.runtime.async_generate(
                input_ids=[b["input_ids"] for b in bodies],
                sampling_params=[b["sampling_params"] for b in bodies],
                return_logprob=True,
            )
        finally:
            self._in_flight -= 1
        outputs = outputs if isinstance(outputs, list) else [outputs]
        return [parse_sglang_output(output, self._version) for output in outputs]

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Load new weights: a checkpoint directory from disk, or named tensors directly."""
        if isinstance(weights, str | os.PathLike):
            result = await asyncio.to_thread(
                self.runtime.update_weights_from_disk, os.fspath(weights), weight_version=str(version)
            )
        else:
            items = list(weights.items() if isinstance(weights, Mapping) else weights)
            result = await asyncio.to_thread(
                self.runtime.update_weights_from_tensor, named_tensors=items, weight_version=str(version)
            )
        _check_result("update_weights", result)
        self._version = version

    async def pause(self) -> None:
        """Hold new requests until ``resume()``; returns once the requests in flight are done."""
        self._paused = True
        while self._in_flight:
            await asyncio.sleep(0.005)

    async def resume(self) -> None:
        self._paused = False

    async def sleep(self) -> None:
        await self.pause()
        await asyncio.to_thread(self.runtime.release_memory_occupation)

    async def wake_up(self) -> None:
        await asyncio.to_thread(self.runtime.resume_memory_occupation)
        await self.resume()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shutdown = getattr(self.runtime, "shutdown", None)
        if shutdown is not None:
            shutdown()


def _check_result(what: str, result: Any) -> None:
    """SGLang's control calls answer ``(success, message)`` or ``{"success": ..., "message": ...}``."""
    if isinstance(result, Mapping):
        success, message = result.get("success", True), result.get("message", "")
    elif isinstance(result, tuple) and result and isinstance(result[0], bool):
        success, message = result[0], result[1] if len(result) > 1 else ""
    else:
        return
    if not success:
        raise RuntimeError(f"SGLang {what} failed: {message}")
