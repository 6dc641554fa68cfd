"""Tinker sampling clients on aloft's embedded engine.

A sampler is a frozen snapshot of a training client's adapters (``save_weights_for_sampler``) or the
base model itself. One ``HFEngine`` holds the base model; before a sampler's requests run, its
adapters reach the engine through aloft's adapter-only weight sync (``HFEngine.update_lora``: each
adapted weight becomes ``W0 + scale * B @ A``). Requests of the sampler the engine holds run
together in the engine's batches; another sampler's requests wait until those are done, then the
engine switches. ``compute_logprobs`` scores the prompt under the same weights
(``HFEngine.prompt_logprobs``).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from aloft.inference.hf import HFEngine
from aloft.tinker.errors import TinkerUserError
from aloft.tinker.wire import SampledSequence, encode_sample_response
from aloft.types import GenerationRequest, LoraAdapters, SamplingParams


@dataclass(kw_only=True)
class Sampler:
    sampler_id: str
    adapters: LoraAdapters | None
    """None: the base model."""
    model_path: str | None = None
    """The ``tinker://`` path it was saved under, if it was named."""


@dataclass(kw_only=True)
class SampleCall:
    """A decoded ``asample`` request."""

    prompt: list[int]
    num_samples: int
    params: SamplingParams
    prompt_logprobs: bool
    prompt_logprobs_last_n: int | None = None


def decode_sample_request(body: dict[str, Any], max_length: int) -> SampleCall:
    """Read an ``asample`` body into a ``SampleCall``; refuse what aloft does not serve, by name."""
    prompt: list[int] = []
    for chunk in (body.get("prompt") or {}).get("chunks", []):
        if chunk.get("type") != "encoded_text":
            raise TinkerUserError(
                f"a prompt chunk of type {chunk.get('type')!r}: aloft samples text prompts only"
            )
        prompt.extend(int(token) for token in chunk["tokens"])
    if not prompt:
        raise TinkerUserError("the prompt has no tokens")
    for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
        if body.get(key):
            raise TinkerUserError(f"{key} > 0 is not served by aloft yet; ask for 0")
    if body.get("record_stability_info"):
        raise TinkerUserError(
            "record_stability_info is not served by aloft (it feeds the stable_reinforce loss, which "
            "aloft does not serve); create the sampling client without it"
        )
    raw = body.get("sampling_params") or {}
    max_tokens = raw.get("max_tokens") or 256
    if len(prompt) + max_tokens > max_length:
        raise TinkerUserError(
            f"prompt of {len(prompt)} tokens + max_tokens {max_tokens} is over this server's limit of "
            f"{max_length} (start tinker-serve with a larger --max-length)"
        )
    stop = raw.get("stop")
    stop_strings = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str)]
    stop_tokens = [s for s in stop or [] if isinstance(s, int)] if not isinstance(stop, str) else []
    top_k = int(raw.get("top_k", -1))
    params = SamplingParams(
        max_tokens=int(max_tokens),
        temperature=float(raw.get("temperature", 1.0)),
        top_p=float(raw.get("top_p", 1.0)),
        top_k=0 if top_k < 0 else top_k,
        stop=stop_strings,
        stop_token_ids=stop_tokens,
        seed=raw.get("seed"),
    )
    num_samples = int(body.get("num_samples", 1))
    if num_samples < 1:
        raise TinkerUserError(f"num_samples must be >= 1, got {num_samples}")
    last_n = body.get("prompt_logprobs_last_n")
    return SampleCall(
        prompt=prompt,
        num_samples=num_samples,
        params=params,
        prompt_logprobs=bool(body.get("prompt_logprobs")),
        prompt_logprobs_last_n=None if last_n is None else int(last_n),
    )


class SamplingHost:
    """The engine and the samplers it serves."""

    def __init__(self, model_path: str, *, seed: int = 0) -> None:
        self.engine = HFEngine(model_path, seed=seed, prefix_cache_gb=0.5)
        self.samplers: dict[str, Sampler] = {}
        self._holding: str | None = None  # the sampler whose weights the engine holds (None = base)
        self._touched: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # modules adapters changed
        self._running = 0
        self._switch: asyncio.Condition | None = None
        self._versions = itertools.count(1)

    def add(self, sampler: Sampler) -> None:
        self.samplers[sampler.sampler_id] = sampler

    async def _hold(self, sampler: Sampler) -> None:
        """Wait until the engine holds ``sampler``'s weights, switching when no other sampler runs."""
        if self._switch is None:
            self._switch = asyncio.Condition()
        async with self._switch:
            await self._switch.wait_for(lambda: self._holding == sampler.sampler_id or self._running == 0)
            if self._holding != sampler.sampler_id:
                await self.engine.update_lora(self._weights_for(sampler), next(self._versions))
                self._holding = sampler.sampler_id
            self._running += 1

    def _weights_for(self, sampler: Sampler) -> LoraAdapters:
        """The sampler's adapters, plus zero deltas for modules an earlier sampler changed and this
        one does not (so they return to the base weights)."""
        adapters = sampler.adapters or LoraAdapters(scale=1.0, modules={})
        modules = dict(adapters.modules)
        for name, (a, b) in self._touched.items():
            if name not in modules:
                modules[name] = (torch.zeros_like(a), torch.zeros_like(b))
        for name, (a, b) in adapters.modules.items():
            self._touched[name] = (a, b)
        return LoraAdapters(scale=adapters.scale, modules=modules)

    async def _release(self) -> None:
        assert self._switch is not None
        async with self._switch:
            self._running -= 1
            self._switch.notify_all()

    async def sample(self, sampler: Sampler, call: SampleCall) -> bytes:
        """``num_samples`` completions of the prompt (and its logprobs when asked) as a ``SampleResponse``."""
        await self._hold(sampler)
        try:
            params = call.params
            requests = [
                GenerationRequest(
                    prompt_ids=call.prompt,
                    sampling=SamplingParams(
                        **{**vars(params), "seed": None if params.seed is None else params.seed + i}
                    ),
                )
                for i in range(call.num_samples)
            ]
            completions = await self.engine.generate(requests)
            prompt_logprobs = await self.engine.prompt_logprobs(call.prompt) if call.prompt_logprobs else None
        finally:
            await self._release()
        if prompt_logprobs is not None and call.prompt_logprobs_last_n is not None:
            hidden = max(0, len(prompt_logprobs) - call.prompt_logprobs_last_n)
            prompt_logprobs = [None] * hidden + prompt_logprobs[hidden:]
        sequences = [
            SampledSequence(tokens=c.token_ids, logprobs=c.logprobs, stopped=c.finish_reason == "stop")
            for c in completions
        ]
        return encode_sample_response(sequences, prompt_logprobs)
