"""A stand-in for SGLang (which has no CPU build) that speaks its API over aloft's real ``hf`` engine.

- ``StandInRuntime``: the methods of ``sglang.Engine`` that ``SGLangEngine`` calls
  (``async_generate``, ``update_weights_from_disk``, ``update_weights_from_tensor``,
  ``release_memory_occupation``, ``resume_memory_occupation``, ``shutdown``), with SGLang's argument
  names and result shapes.
- ``build_sglang_app``: a FastAPI app with SGLang's native HTTP routes (``/generate``,
  ``/update_weights_from_disk``, ``/pause_generation``, ``/continue_generation``,
  ``/release_memory_occupation``, ``/resume_memory_occupation``, ``/flush_cache``, ``/health``),
  served on 127.0.0.1 by ``aloft.inference.server.ServerThread``.

Both are strict about field names: an argument SGLang does not know is an error here, as it is in
SGLang's ``GenerateReqInput`` / ``SamplingParams``, so a misspelt field fails the tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from aloft.inference.hf import HFEngine
from aloft.types import Completion, GenerationRequest, SamplingParams

SGLANG_GENERATE_FIELDS = {
    "text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
    "return_text_in_logprobs", "stream", "rid", "lora_path", "custom_logit_processor",
}  # fmt: skip
"""Fields of SGLang's ``GenerateReqInput`` (a subset: those an RL client may send)."""

SGLANG_SAMPLING_FIELDS = {
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
    "skip_special_tokens", "no_stop_trim", "ignore_eos", "sampling_seed", "frequency_penalty",
    "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "spaces_between_special_tokens",
}  # fmt: skip
"""Fields of SGLang's ``SamplingParams``."""


def _check_fields(given: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}")


def _to_request(input_ids: list[int], sampling: dict[str, Any]) -> GenerationRequest:
    _check_fields(sampling, SGLANG_SAMPLING_FIELDS, "sampling_params")
    if sampling.get("no_stop_trim") is not True:
        raise ValueError("this stand-in keeps stop strings (no_stop_trim=True), as aloft asks")
    top_k = int(sampling.get("top_k", -1))
    return GenerationRequest(
        prompt_ids=list(input_ids),
        sampling=SamplingParams(
            max_tokens=int(sampling.get("max_new_tokens", 128)),
            temperature=float(sampling.get("temperature", 1.0)),
            top_p=float(sampling.get("top_p", 1.0)),
            top_k=0 if top_k == -1 else top_k,
            stop=list(sampling.get("stop") or []),
            stop_token_ids=list(sampling.get("stop_token_ids") or []),
            seed=sampling.get("sampling_seed"),
        ),
    )


def _to_output(completion: Completion, tokenizer: Any, weight_version: str) -> dict[str, Any]:
    finish: dict[str, Any] = {"type": completion.finish_reason}
    if completion.finish_reason == "length":
        finish["length"] = len(completion.token_ids)
    return {
        "text": completion.text,
        "output_ids": completion.token_ids,
        "meta_info": {
            "id": "standin",
            "finish_reason": finish,
            "prompt_tokens": 0,
            "completion_tokens": len(completion.token_ids),
            "output_token_logprobs": [
                [lp, tok, tokenizer.decode([tok])]
                for lp, tok in zip(completion.logprobs, completion.token_ids)
            ],
            "weight_version": weight_version,
        },
    }


class StandInRuntime:
    """``sglang.Engine``'s RL-facing methods over an ``HFEngine``."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.weight_version = "default"
        self.memory_released = False
        self.calls: list[str] = []

    async def async_generate(
        self, input_ids: list[int] | list[list[int]], sampling_params: Any, return_logprob: bool = False, **kw
    ) -> dict[str, Any] | list[dict[str, Any]]:
        _check_fields(
            {"input_ids": 0, "sampling_params": 0, "return_logprob": 0, **kw},
            SGLANG_GENERATE_FIELDS,
            "generate",
        )
        if self.memory_released:
            raise RuntimeError("generate after release_memory_occupation")
        single = bool(input_ids) and isinstance(input_ids[0], int)
        prompts = [input_ids] if single else input_ids
        params = [sampling_params] * len(prompts) if isinstance(sampling_params, dict) else sampling_params
        completions = await self.engine.generate([_to_request(p, s) for p, s in zip(prompts, params)])
        outputs = [_to_output(c, self.engine.tokenizer, self.weight_version) for c in completions]
        if not return_logprob:
            for output in outputs:
                del output["meta_info"]["output_token_logprobs"]
        return outputs[0] if single else outputs

    def update_weights_from_disk(
        self, model_path: str, weight_version: str | None = None, **_: Any
    ) -> tuple[bool, str]:
        self.calls.append("update_weights_from_disk")
        try:
            asyncio.run(self.engine.update_weights(model_path, version=int(weight_version or 0)))
        except (FileNotFoundError, KeyError, ValueError) as error:
            return False, str(error)
        self.weight_version = weight_version or self.weight_version
        return True, "Succeeded to update model weights."

    def update_weights_from_tensor(
        self, named_tensors: list[tuple[str, Any]], weight_version: str | None = None, **_: Any
    ) -> tuple[bool, str]:
        self.calls.append("update_weights_from_tensor")
        asyncio.run(self.engine.update_weights(named_tensors, version=int(weight_version or 0)))
        self.weight_version = weight_version or self.weight_version
        return True, "Succeeded to update model weights."

    def release_memory_occupation(self) -> None:
        self.calls.append("release_memory_occupation")
        self.memory_released = True

    def resume_memory_occupation(self) -> None:
        self.calls.append("resume_memory_occupation")
        self.memory_released = False

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        self.engine.close()


def build_sglang_app(runtime: StandInRuntime) -> FastAPI:
    """SGLang's native HTTP API over a ``StandInRuntime`` (pause holds new /generate requests)."""
    app = FastAPI()
    resumed = asyncio.Event()
    resumed.set()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {}

    @app.post("/generate")
    async def generate(request: Request) -> Any:
        body = await request.json()
        await resumed.wait()
        try:
            _check_fields(body, SGLANG_GENERATE_FIELDS, "GenerateReqInput")
            return await runtime.async_generate(**body)
        except ValueError as error:
            raise HTTPException(status_code=400, detail=str(error)) from error

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> dict[str, Any]:
        body = await request.json()
        success, message = await asyncio.to_thread(runtime.update_weights_from_disk, **body)
        return {"success": success, "message": message}

    @app.post("/pause_generation")
    async def pause_generation() -> dict[str, Any]:
        resumed.clear()
        return {}

    @app.post("/continue_generation")
    async def continue_generation() -> dict[str, Any]:
        resumed.set()
        return {}

    @app.post("/release_memory_occupation")
    async def release() -> dict[str, Any]:
        runtime.release_memory_occupation()
        return {}

    @app.post("/resume_memory_occupation")
    async def resume() -> dict[str, Any]:
        runtime.resume_memory_occupation()
        return {}

    @app.post("/flush_cache")
    async def flush_cache() -> dict[str, Any]:
        return {}

    return app
