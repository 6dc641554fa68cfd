"""One ``InferenceEngine`` contract, checked on every backend (issue 4, "What it must show").

Each backend is an entry of ``ENGINE_FACTORIES``: a function ``(model, tokenizer) -> (engine, close)``
that builds an engine serving a copy of ``model`` (an fp32 HF model object). The ``contract`` fixture is
parametrized over the dict, so a new backend is one more entry.

Backends:

- ``hf``: the embedded ``HFEngine``, in-process.
- ``remote``: a ``RemoteEngine`` talking to a real ``aloft serve`` (uvicorn on 127.0.0.1, in a thread)
  that serves an ``HFEngine``.
- ``sglang``: ``SGLangEngine`` over ``tests.inference.sglang_standin.StandInRuntime`` (SGLang's engine
  methods and result shapes over an ``HFEngine``: SGLang has no CPU build, so this checks the adapter's
  requests and responses; a GPU machine runs the real engine).
- ``remote-sglang``: ``RemoteEngine(server="sglang")`` talking to a loopback server with SGLang's native
  routes (``build_sglang_app``) over the same stand-in.
- ``vllm``: ``VLLMEngine`` (vLLM's engine in-process) over the model saved to a directory.
- ``remote-vllm``: a ``RemoteEngine(server="vllm")`` talking to a real ``vllm serve`` subprocess on
  127.0.0.1 (dev mode for weight reload and pause/resume).

The vLLM backends need vLLM importable: on CPU machines the ``vllm-cpu`` package lives in its own
environment (``scripts/setup_vllm_cpu.sh``; CONTRIBUTING.md), where ``.ci/run`` runs this file again
(``-m vllm``). In the main environment they are skipped with that reason. The model has head_dim 32,
the least vLLM's CPU attention accepts.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from aloft.inference import InferenceEngine
from aloft.inference.hf import HFEngine
from aloft.types import Completion, GenerationRequest, SamplingParams

QUESTIONS = ["What is 2+3?", "hi", "Compute the sum of 12 and 99, then tell me the answer please."]

EngineFactory = Callable[[Any, Any], tuple[InferenceEngine, Callable[[], None]]]


def _hf_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    engine = HFEngine(model, tokenizer, dtype="float32")
    return engine, engine.close


def _remote_aloft_serve_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from aloft.inference.remote import RemoteEngine
    from aloft.inference.server import ServerThread, build_app

    served = HFEngine(model, tokenizer, dtype="float32")
    server = ServerThread(build_app(served, tokenizer, model_name="tiny")).start()
    engine = RemoteEngine([server.url], timeout_s=60)

    def close() -> None:
        engine.close()
        server.stop()
        served.close()

    return engine, close


HAS_VLLM = importlib.util.find_spec("vllm") is not None
NEEDS_VLLM = (
    "vllm is not installed here; run scripts/setup_vllm_cpu.sh and .venv-vllm/bin/python -m pytest -m vllm"
)


def _save_model_dir(model: Any, tokenizer: Any) -> str:
    directory = tempfile.mkdtemp(prefix="aloft-contract-model-")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _vllm_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    from aloft.inference.vllm_engine import VLLMEngine

    directory = _save_model_dir(model, tokenizer)
    engine = VLLMEngine(directory, dtype="float32", max_model_len=512)

    def close() -> None:
        engine.close()
        shutil.rmtree(directory, ignore_errors=True)

    return engine, close


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _remote_vllm_serve_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    from aloft.inference.remote import RemoteEngine

    directory = _save_model_dir(model, tokenizer)
    port = _free_port()
    env = {
        **os.environ,
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    # vLLM's OpenAI server module (`vllm serve` itself looks up the "vllm" distribution's version,
    # which the vllm-cpu package does not provide).
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", directory]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager"]
    command += ["--max-model-len", "512", "--logprobs-mode", "processed_logprobs", "--seed", "0"]
    log = open(os.path.join(directory, "server.log"), "wb")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    def close() -> None:
        engine.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        if server.poll() is not None:
            log.flush()
            tail = open(os.path.join(directory, "server.log"), errors="replace").read()[-3000:]
            raise RuntimeError(f"vllm serve exited with {server.returncode}:\n{tail}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.kill()
            raise TimeoutError("vllm serve did not become healthy in 240 s")
        time.sleep(0.5)
    engine = RemoteEngine([url], server="vllm", timeout_s=120, model_or_path=directory)
    return engine, close


def _sglang_standin_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    from tests.inference.sglang_standin import StandInRuntime

    from aloft.inference.sglang_engine import SGLangEngine

    engine = SGLangEngine(runtime=StandInRuntime(HFEngine(model, tokenizer, dtype="float32")))
    return engine, engine.close


def _remote_sglang_standin_factory(model: Any, tokenizer: Any) -> tuple[InferenceEngine, Callable[[], None]]:
    from tests.inference.sglang_standin import StandInRuntime, build_sglang_app

    from aloft.inference.remote import RemoteEngine
    from aloft.inference.server import ServerThread

    runtime = StandInRuntime(HFEngine(model, tokenizer, dtype="float32"))
    server = ServerThread(build_sglang_app(runtime)).start()
    engine = RemoteEngine([server.url], server="sglang", timeout_s=60)

    def close() -> None:
        engine.close()
        server.stop()
        runtime.shutdown()

    return engine, close


ENGINE_FACTORIES: dict[str, EngineFactory] = {
    "hf": _hf_factory,
    "remote": _remote_aloft_serve_factory,
    "sglang": _sglang_standin_factory,
    "remote-sglang": _remote_sglang_standin_factory,
    "vllm": _vllm_factory,
    "remote-vllm": _remote_vllm_serve_factory,
}

LOGPROB_TOLERANCE = {
    "hf": 1e-4,
    "remote": 1e-4,
    "sglang": 1e-4,
    "remote-sglang": 1e-4,
    "vllm": 1e-2,
    "remote-vllm": 1e-2,
}
"""Mean |sampler - trainer| logprob allowed per backend (fp32 here; issue 4 asks <= 1e-2 for vllm-cpu)."""

VLLM_BACKENDS = {"vllm", "remote-vllm"}


@dataclass
class Contract:
    name: str
    engine: InferenceEngine
    tokenizer: Any
    model: Any
    """The fp32 HF model the engine serves (the trainer-side reference)."""
    build: Callable[[Any], tuple[InferenceEngine, Callable[[], None]]]
    """Build another engine of this backend over a given model object."""
    prompts: list[list[int]]


@pytest.fixture(scope="module")
def contract_model_dir(tmp_path_factory):
    from tests.conftest import build_vllm_tiny_model

    return build_vllm_tiny_model(tmp_path_factory.mktemp("contract-model") / "llama")


@pytest.fixture(scope="module")
def tokenizer(contract_model_dir):
    return AutoTokenizer.from_pretrained(contract_model_dir)


@pytest.fixture(scope="module")
def reference_model(contract_model_dir):
    return AutoModelForCausalLM.from_pretrained(contract_model_dir, dtype=torch.float32).eval()


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(name, marks=[pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason=NEEDS_VLLM)])
        if name in VLLM_BACKENDS
        else name
        for name in sorted(ENGINE_FACTORIES)
    ],
)
def contract(request, tokenizer, reference_model):
    factory = ENGINE_FACTORIES[request.param]
    chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
    prompts = [list(tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"]) for c in chats]
    engine, close = factory(reference_model, tokenizer)
    try:
        yield Contract(
            name=request.param,
            engine=engine,
            tokenizer=tokenizer,
            model=reference_model,
            build=lambda model: factory(model, tokenizer),
            prompts=prompts,
        )
    finally:
        close()


def req(prompt_ids, **sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=list(prompt_ids), sampling=SamplingParams(**sampling))


def generate(engine: InferenceEngine, requests: list[GenerationRequest]) -> list[Completion]:
    return asyncio.run(engine.generate(requests))


def test_is_an_inference_engine(contract):
    assert isinstance(contract.engine, InferenceEngine)
    assert contract.engine.version == 0


def test_logprobs_as_long_as_tokens_and_max_tokens_respected(contract):
    completions = generate(
        contract.engine,
        [req(p, max_tokens=n, temperature=1.0, seed=n) for p, n in zip(contract.prompts, (3, 9, 6))],
    )
    for completion, n in zip(completions, (3, 9, 6)):
        assert len(completion.token_ids) == len(completion.logprobs) == n
        assert completion.finish_reason == "length" and completion.policy_version == 0
        assert all(lp <= 0 for lp in completion.logprobs)


def test_stop_strings_are_respected(contract):
    tokenizer, prompt = contract.tokenizer, contract.prompts[0]
    (free,) = generate(contract.engine, [req(prompt, max_tokens=24, temperature=0)])
    full_text = tokenizer.decode(free.token_ids, skip_special_tokens=True)
    stop = full_text[10:13]
    assert stop.strip()
    (c,) = generate(contract.engine, [req(prompt, max_tokens=24, temperature=0, stop=[stop])])
    assert c.finish_reason == "stop"
    assert stop in c.text  # kept in the output
    assert c.token_ids == free.token_ids[: len(c.token_ids)]
    # Nothing after the stop: one token fewer would not contain it yet.
    assert stop not in tokenizer.decode(c.token_ids[:-1], skip_special_tokens=True)


def test_eos_ends_the_completion(contract):
    prompt = contract.prompts[1]
    (free,) = generate(contract.engine, [req(prompt, max_tokens=16, temperature=0)])
    eos = free.token_ids[4]
    model = AutoModelForCausalLM.from_pretrained(contract.model.name_or_path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = [contract.tokenizer.eos_token_id, eos]
    engine, close = contract.build(model)
    try:
        (c,) = generate(engine, [req(prompt, max_tokens=16, temperature=0)])
    finally:
        close()
    assert c.token_ids == free.token_ids[: free.token_ids.index(eos) + 1]
    assert c.finish_reason == "stop" and len(c.logprobs) == len(c.token_ids)


def test_temperature_zero_is_deterministic(contract):
    batch = [req(p, max_tokens=16, temperature=0) for p in contract.prompts]
    first, second = generate(contract.engine, batch), generate(contract.engine, batch)
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    a, b = generate(contract.engine, [batch[0], batch[0]])
    assert a.token_ids == b.token_ids == first[0].token_ids
    assert a.logprobs == b.logprobs


def test_seeded_sampling_is_reproducible_and_seeds_differ(contract):
    prompt = contract.prompts[2]
    s1, s2, s3 = generate(
        contract.engine,
        [
            req(prompt, max_tokens=16, seed=11),
            req(prompt, max_tokens=16, seed=11),
            req(prompt, max_tokens=16, seed=12),
        ],
    )
    (again,) = generate(contract.engine, [req(prompt, max_tokens=16, seed=11)])
    assert s1.token_ids == s2.token_ids == again.token_ids
    assert s1.token_ids != s3.token_ids  # 16 draws from a random model: a clash is vanishingly unlikely


def test_sampler_logprobs_match_trainer_logprobs(contract):
    temperature = 0.7
    completions = generate(
        contract.engine, [req(p, max_tokens=20, temperature=temperature, seed=5) for p in contract.prompts]
    )
    diffs = []
    for prompt, completion in zip(contract.prompts, completions):
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logits = contract.model(ids).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.log_softmax(logits / temperature, dim=-1)
        expected = expected.gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        diffs.append((expected - torch.tensor(completion.logprobs)).abs())
    assert torch.cat(diffs).mean().item() <= LOGPROB_TOLERANCE[contract.name]


def test_outputs_follow_updated_weights(contract):
    generator = torch.Generator().manual_seed(0)
    perturbed = {
        name: tensor.detach() + 0.5 * torch.randn(tensor.shape, generator=generator)
        if tensor.dim() == 2
        else tensor.detach()
        # named_parameters lists a tied weight once, so the update holds no conflicting copies of it.
        for name, tensor in contract.model.named_parameters()
    }
    greedy = [req(p, max_tokens=12, temperature=0) for p in contract.prompts]
    engine, close = contract.build(contract.model)
    fresh_model = AutoModelForCausalLM.from_pretrained(
        contract.model.name_or_path, dtype=torch.float32
    ).eval()
    fresh_model.load_state_dict(perturbed, strict=False)
    fresh = HFEngine(fresh_model, contract.tokenizer, dtype="float32")
    try:
        before = generate(engine, greedy)
        asyncio.run(engine.update_weights(perturbed, version=3))
        after = generate(engine, greedy)
        expected = generate(fresh, greedy)
    finally:
        close()
        fresh.close()
    assert engine.version == 3 and all(c.policy_version == 3 for c in after)
    assert [c.token_ids for c in after] == [c.token_ids for c in expected]
    assert [c.token_ids for c in after] != [c.token_ids for c in before]


def test_request_sent_while_paused_completes_after_resume(contract):
    engine, prompt = contract.engine, contract.prompts[0]

    async def scenario() -> Completion:
        await engine.pause()
        try:
            task = asyncio.ensure_future(engine.generate([req(prompt, max_tokens=4, temperature=0)]))
            await asyncio.sleep(0.3)
            assert not task.done()
        finally:
            await engine.resume()
        return (await asyncio.wait_for(task, timeout=30))[0]

    completion = asyncio.run(scenario())
    assert len(completion.token_ids) == 4 and completion.finish_reason == "length"
