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
