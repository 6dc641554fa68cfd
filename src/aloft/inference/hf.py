"""``HFEngine``: the embedded transformers engine (batched, KV-cached, token-in/token-out).

Many rollout coroutines each ``await engine.generate([request])``; an ``aloft.inference.batching.
RequestBatcher`` queues them, and the engine decodes with continuous batching on the process's torch
compute thread (so the event loop stays free for environments and tools): up to ``max_batch_size``
rows decode together, a finished row leaves at once (its caller gets its completion), and queued
requests join the running batch whenever rows are free (``aloft.inference.decoding.BatchDecoder``).

That thread is the only place the model is touched: batches and weight updates go to the same
one-thread executor, and an update stops admissions and waits for the running rows to finish, and every ``Completion``
carries the ``policy_version`` of the weights that produced all of its tokens.

Sampler logprobs are ``log_softmax(logits.float() / T)`` of each generated token, before top-k/top-p
(T = 1 when greedy); see ``aloft.inference.sampling``.
"""

from __future__ import annotations

import copy
import gc
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from aloft.inference.base import WeightsSource, register_engine
from aloft.inference.batching import Deliver, RequestBatcher, Take, check_prompt
from aloft.inference.decoding import BatchDecoder
from aloft.inference.prefix_cache import PrefixCache
from aloft.inference.prefix_tree import MIN_SHARED_TOKENS
from aloft.inference.prepacked import prepack_linears, prepacking_supported, repack_linears
from aloft.inference.shared_prefix import SHARED_PREFIX_ATTENTION, shared_prefix_supported
from aloft.inference.stopping import DecodeLimits, end_of_completion_ids
from aloft.models.compute_thread import compute_executor, on_compute_thread
from aloft.models.device import resolve_device
from aloft.models.loading import load_model, load_tokenizer
from aloft.models.precision import fast_dtype
from aloft.types import Completion, GenerationRequest, LoraAdapters, SamplingParams

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _parse_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return fast_dtype(device)
    if dtype not in _DTYPES:
        raise ValueError(f"HFEngine: unknown dtype {dtype!r}; use one of auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


@dataclass
class EngineStats:
    """Counters since the engine was built (read them for throughput metrics and batching checks)."""

    batches: int = 0
    """Admissions: groups of queued requests prefilled together and joined to the running batch."""
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prefilled_tokens: int = 0
    """Prompt tokens run through the model: shared prompts count once, reused caches not at all."""
    prefill_seconds: float = 0.0
    """Wall time spent admitting requests (their prefill), part of ``busy_seconds``."""
    busy_seconds: float = 0.0
    """Wall time spent inside batches (the worker thread), excluding queueing."""


@register_engine("hf")
class HFEngine:
    """Batched generation with a private copy of a transformers causal LM.

    Args:
        model_or_path: a model directory / built-in name / hub id (loaded in ``dtype``), or a
            ``PreTrainedModel`` (copied, so training the original never races with generation).
        tokenizer: needed with a model object; loaded from ``model_or_path`` when it is a name.
        dtype: weights' dtype for generation: "float32", "bfloat16", or "auto" (bfloat16 where the
            hardware has native bf16 math, e.g. AVX512-BF16/AMX CPUs, else float32). Logprobs are
            always computed in float32 from the logits.
        max_batch_size: most rows decoded together.
        device: where the engine's copy lives: "auto" (this local rank's GPU when torch sees one,
            else the CPU; see ``aloft.models.device.resolve_device``), "cpu", "cuda", "cuda:N".
        seed: seeds the engine RNG that draws a seed for each request without one.
        batch_wait_s: how long the batcher lets callers gather before starting a batch.
        prefix_cache_gb: memory for the KV of finished rows and prompts, so that the next turn of a
            trajectory (a request with a ``session_id`` whose prompt continues a finished one) prefills
            only its new tokens (``aloft.inference.prefix_cache``); 0 turns it off.
        min_shared_prefix: prompts that share a beginning of this many tokens or more (with each
            other, or with a prompt decoding or cached) prefill it once (``aloft.inference.prefix_tree``:
            logprobs equal a plain prefill's up to float rounding); 0: every prompt prefilled whole.
    """

    def __init__(
        self,
        model_or_path: str | os.PathLike[str] | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | str | None = None,
        *,
        dtype: str | torch.dtype = "float32",
        max_batch_size: int = 64,
        device: str | torch.device = "auto",
        seed: int = 0,
        batch_wait_s: float = 0.002,
        prefix_cache_gb: float = 2.0,
        min_shared_prefix: int = MIN_SHARED_TOKENS,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"HFEngine: max_batch_size must be >= 1, got {max_batch_size}")
        if prefix_cache_gb < 0:
            raise ValueError(
                f"HFEngine: prefix_cache_gb must be >= 0 (0 turns the cache off), got {prefix_cache_gb}"
            )
        if min_shared_prefix < 0:
            raise ValueError(
                f"HFEngine: min_shared_prefix must be >= 0 (0 prefills every prompt whole), got {min_shared_prefix}"
            )
        device = resolve_device(device) if isinstance(device, str) else device
        torch_dtype = _parse_dtype(dtype, device)
        if not isinstance(model_or_path, str | os.PathLike) and tokenizer is None:
            raise ValueError("HFEngine needs a tokenizer with a model object: HFEngine(model, tokenizer)")
        if tokenizer is None or isinstance(tokenizer, str):
            tokenizer = load_tokenizer(str(tokenizer or model_or_path))
        # Loading, copying and casting run parallel torch ops: on the compute thread, so the caller's
        # thread never starts an OpenMP team of its own (see aloft.models.compute_thread).
        model = on_compute_thread(_private_model, model_or_path, torch_dtype, torch.device(device))
        self.model: PreTrainedModel = model
        self.tokenizer: PreTrainedTokenizerBase = tokenizer
        self.device = torch.device(device)
        self.dtype = torch_dtype
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.stats = EngineStats()
        self.prefix_cache = PrefixCache(int(prefix_cache_gb * 2**30))
        self.min_shared_prefix = min_shared_prefix
        self.limits = DecodeLimits(
            eos_ids=end_of_completion_ids(tokenizer, getattr(model, "generation_config", None)),
            pad_id=_pad_id(tokenizer),
            max_positions=int(getattr(model.config, "max_position_embeddings", None) or 1 << 30),
        )
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._version = 0
        self._lora_base: dict[str, torch.Tensor] = {}
        """Module weights before the first adapter-only sync (``update_lora`` adds B @ A to them)."""
        self._lora_base_known = True
        """The engine holds the weights it was built with (False after a full ``update_weights``)."""
        # Batches and weight updates run on the process's one torch compute thread (see
        # aloft.models.compute_thread), shared with the trainer's update so a single OpenMP team does
        # all the math.
        self._batcher = RequestBatcher(
            None,
            compute_executor(),
            run_continuous=self._run_continuous,
            name="HFEngine",
            max_batch_size=max_batch_size,
            batch_wait_s=batch_wait_s,
            seed=seed,
        )
        self._closed = False

    # ------------------------------------------------------------------------------------------------
    # InferenceEngine protocol
    # ------------------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Queue the requests for the batcher and wait for all their completions (same order)."""
        for request in requests:
            check_prompt(request, self._vocab_size, self.limits.max_positions)
        return await self._batcher.submit(requests)

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Copy new weights into the engine's model (cast to its dtype) and set ``version``.

        ``weights``: ``(name, tensor)`` pairs or a mapping, named as in the HF model's ``state_dict`` (a
        subset is fine; tied weights may come under either name), or a checkpoint directory /
        ``.safetensors`` file. An unknown name or wrong shape rejects the whole update. Runs between
        batches: a batch in flight finishes with the old weights and version.
        """
        if self._closed:
            raise RuntimeError("HFEngine is closed; build a new engine")
        if isinstance(weights, Mapping):
            weights = list(weights.items())
        elif not isinstance(weights, str | os.PathLike):
            weights = list(weights)  # gather in the caller's thread (a trainer may yield lazily)
        await self._batcher.run_exclusive(self._load_weights, weights, version)

    async def update_lora(self, adapters: LoraAdapters, version: int) -> None:
        """Adapter-only weight sync: each listed module's weight becomes ``W0 + scale * B @ A``
        (computed in float32, then cast to the engine's dtype), W0 being the weight the engine was
        built with. Refused after a full ``update_weights`` (W0 is gone then). Runs between batches,
        like ``update_weights``."""
        if self._closed:
            raise RuntimeError("HFEngine is closed; build a new engine")
        await self._batcher.run_exclusive(self._load_lora, adapters, version)

    def _load_lora(self, adapters: LoraAdapters, version: int) -> None:
        if not self._lora_base_known:
            raise RuntimeError(
                "update_lora after a full update_weights: the engine's weights are no longer the base "
                "model the adapters apply to; keep one kind of sync per engine (placement.lora_sync)"
            )
        modules = dict(self.model.named_modules())
        unknown = [
            name
            for name in adapters.modules
            if not isinstance(getattr(modules.get(name), "weight", None), torch.Tensor)
        ]
        if unknown:
            raise ValueError(f"update_lora: modules without a weight in this model: {unknown[:5]}")
        with torch.no_grad():
            for name, (a, b) in adapters.modules.items():
                weight = modules[name].weight
                if weight is self.model.get_input_embeddings().weight:
                    # A tied output head: the adapter applies to the head alone, as in peft, so the
                    # head gets a weight of its own and the input embeddings stay the base ones.
                    modules[name].weight = torch.nn.Parameter(weight.detach().clone(), requires_grad=False)
                    weight = modules[name].weight
                base = self._lora_base.setdefault(name, weight.detach().clone())
                delta = adapters.scale * (
                    b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)
                )
                weight.copy_(base.float() + delta)
        repack_linears(self.model)
        self.prefix_cache.clear()
        self._version = version

    async def prompt_logprobs(self, token_ids: list[int]) -> list[float | None]:
        """Each token's logprob given the tokens before it, under the engine's current weights (None
        for the first, which has no context): a prompt scored as Tinker's ``compute_logprobs`` does.
        Runs between batches, in float32 from the logits, at temperature 1."""
        if self._closed:
            raise RuntimeError("HFEngine is closed; build a new engine")
        if not token_ids:
            return []
        check_prompt(
            GenerationRequest(prompt_ids=token_ids, sampling=SamplingParams(max_tokens=1)),
            self._vocab_size,
            self.limits.max_positions,
        )
        return await self._batcher.run_exclusive(self._prompt_logprobs, token_ids)

    def _prompt_logprobs(self, token_ids: list[int]) -> list[float | None]:
        ids = torch.tensor([token_ids], device=self.device)
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, :-1].float()
        logprobs = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        return [None, *logprobs.tolist()]

    async def end_sessions(self, session_ids: list[str]) -> None:
        """The sessions (and their samples ``<id>/<k>``) made their last request: free the KV the
        prefix cache kept for their next turn, at once (between decode steps if a batch runs)."""
        self.prefix_cache.release_sessions(session_ids)

    async def pause(self) -> None:
        """Start no new batch until ``resume()``; returns once the batch in flight (if any) is done.

        Requests keep queueing while paused and run after ``resume()``.
        """
        await self._batcher.hold("pause")

    async def resume(self) -> None:
        self._batcher.release("pause")

    async def sleep(self) -> None:
        """Finish the batch in flight, then free memory (weights move to CPU on an accelerator).

        ``generate`` raises until ``wake_up()``; requests queued before ``sleep`` wait for it.
        """
        await self._batcher.hold("sleep")
        await self._batcher.run_exclusive(self._offload)

    async def wake_up(self) -> None:
        if self._batcher.is_held("sleep"):
            await self._batcher.run_exclusive(self._onload)
        self._batcher.release("sleep")

    def close(self) -> None:
        """Fail queued requests (a batch in flight runs to its end); the shared compute thread stays."""
        self._closed = True
        self._batcher.close()
        self.prefix_cache.clear()

    # ------------------------------------------------------------------------------------------------
    # Batches, weights and memory (the compute thread)
    # ------------------------------------------------------------------------------------------------

    def _run_continuous(self, take: Take, deliver: Deliver) -> None:
        """Continuous batching: admit queued requests whenever rows are free, deliver rows as they end."""
        started = time.perf_counter()
        decoder = BatchDecoder(
            self.model,
            self.tokenizer,
            self.limits,
            version=self._version,
            max_rows=self.max_batch_size,
            prefix_cache=self.prefix_cache,
            min_shared_prefix=self.min_shared_prefix,
        )
        with self.prefix_cache.in_use():  # sessions ended meanwhile wait for a safe point
            try:
                while True:
                    self.prefix_cache.apply_released()
                    if decoder.can_admit and len(decoder) < self.max_batch_size:
                        joining = take(self.max_batch_size - len(decoder))
                        if joining:
                            requests = [request for request, _, _ in joining]
                            prefilled, admitting = decoder.prefilled_tokens, time.perf_counter()
                            decoder.admit(
                                requests, [seed for _, seed, _ in joining], [h for _, _, h in joining]
                            )
                            self.stats.batches += 1
                            self.stats.requests += len(requests)
                            self.stats.prompt_tokens += sum(len(r.prompt_ids) for r in requests)
                            self.stats.prefilled_tokens += decoder.prefilled_tokens - prefilled
                            self.stats.prefill_seconds += time.perf_counter() - admitting
                    if not len(decoder):
                        return
                    for handle, completion in decoder.step():
                        self.stats.completion_tokens += len(completion.token_ids)
                        deliver(handle, completion)
            finally:
                self.stats.busy_seconds += time.perf_counter() - started

    def _load_weights(self, weights: list[tuple[str, Any]] | str | os.PathLike[str], version: int) -> None:
        # Tied weights appear under both names (remove_duplicate=False); copying either updates both.
        targets = {
            **dict(self.model.named_parameters(remove_duplicate=False)),
            **dict(self.model.named_buffers(remove_duplicate=False)),
        }
        if isinstance(weights, str | os.PathLike):
            self._load_checkpoint(Path(weights), targets)
        else:
            _check_weights(((name, tensor.shape) for name, tensor in weights), targets)
            with torch.no_grad():
                for name, tensor in weights:
                    targets[name].copy_(tensor.detach())  # copy_ casts to the engine's dtype and device
        # The engine no longer holds its base weights (a LoRA policy's full sync is base + B @ A):
        # an adapter-only sync now would add the adapters twice, so it is refused (update_lora).
        self._lora_base.clear()
        self._lora_base_known = False
        repack_linears(self.model)
        self.prefix_cache.clear()  # cached keys and values belong to the old weights
        self._version = version

    def _load_checkpoint(self, path: Path, targets: dict[str, torch.Tensor]) -> None:
        from safetensors import safe_open

        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise FileNotFoundError(f"update_weights: no .safetensors checkpoint at {path}")
        handles = [safe_open(str(f), framework="pt") for f in files]
        _check_weights(
            ((name, handle.get_slice(name).get_shape()) for handle in handles for name in handle.keys()),
            targets,
        )
        with torch.no_grad():
            for handle in handles:
                for name in handle.keys():
                    targets[name].copy_(handle.get_tensor(name))

    def _offload(self) -> None:
        self.prefix_cache.clear()
        if self.device.type != "cpu":
            self.model.to("cpu")
            getattr(torch, self.device.type).empty_cache()
        gc.collect()

    def _onload(self) -> None:
        if self.device.type != "cpu":
            self.model.to(self.device)


def _private_model(
    model_or_path: str | os.PathLike[str] | PreTrainedModel, dtype: torch.dtype, device: torch.device
) -> PreTrainedModel:
    """The engine's own inference copy: loaded from a path, or a deep copy of a model object."""
    if isinstance(model_or_path, str | os.PathLike):
        model = load_model(str(model_or_path), dtype=dtype)
    else:
        model = copy.deepcopy(model_or_path).to(dtype)  # training the original never races with generation
    if hasattr(model, "set_attn_implementation"):
        # A group's prompt is then stored once and read once per decode step (aloft.inference.shared_prefix).
        model.set_attn_implementation(SHARED_PREFIX_ATTENTION if shared_prefix_supported(model) else "sdpa")
    model = model.requires_grad_(False).to(device).eval()
    if prepacking_supported(model):
        prepack_linears(model)
    return model


def _check_weights(shapes: Iterable[tuple[str, Any]], targets: dict[str, torch.Tensor]) -> None:
    """Reject a whole update, before any weight is touched, on an unknown name or a wrong shape."""
    unknown = []
    for name, shape in shapes:
        if name not in targets:
            unknown.append(name)
        elif tuple(shape) != tuple(targets[name].shape):
            raise ValueError(
                f"update_weights: {name} has shape {tuple(shape)}, the engine expects {tuple(targets[name].shape)}"
            )
    if unknown:
        raise KeyError(
            f"update_weights: {len(unknown)} unknown weight name(s), e.g. {unknown[:3]}; names must follow "
            f"the HF model's state_dict (e.g. {next(iter(targets))!r})"
        )


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if isinstance(candidate, int):
            return candidate
    return 0  # padded positions are masked out, any valid id works
