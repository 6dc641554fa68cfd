"""Every registered built-in env, end to end through the real Generator and the real trainer.

1. Token-in/token-out: a scripted policy (``aloft.gym.envs.EXAMPLE_REPLIES``: fixed replies that use
   each env's tools) drives real multi-turn episodes; the decoded trajectories contain each
   observation exactly once, every observation token has ``loss_mask`` 0 and the policy tokens are
   exactly the replies' tokens.
2. Each env trains two steps with a tiny random model through ``env=<id>`` (its preset overlay).
"""

from __future__ import annotations

import math

import pytest

from aloft.config import load_config
from aloft.data import build_dataset, validate_row
from aloft.gym import check_env, make
from aloft.gym.envs import BUILTIN_ENVS, EXAMPLE_REPLIES
from aloft.inference import make_engine
from aloft.models import load_tokenizer
from aloft.rollout import EpisodeLimits, Generator
from aloft.trainer import Trainer
from aloft.types import RolloutStatus, SamplingParams

MULTI_TURN = {"math_tool", "search", "text2sql", "code_feedback"}


def env_rows(env_id: str, n: int):
    cfg = load_config(None, [f"env={env_id}"])
    builder = cfg.data.builder or "arithmetic"
    raw = build_dataset(builder, n=n, seed=0, **cfg.data.builder_args)
    return cfg, [validate_row({**r, "env_class": env_id}, i, env_id) for i, r in enumerate(raw)]


def env_training_overrides(
    env_id: str, model_dir: str, run_root, *, steps: int, max_new_tokens: int
) -> list[str]:
    """A seconds-long float32 run of ``env_id`` on a tiny model: 2 prompts x 2 samples a step, no eval."""
    return [
        f"env={env_id}",
        f"model.path={model_dir}",
        f"trainer.run_root={run_root}",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        f"trainer.max_steps={steps}",
        "trainer.prompts_per_step=2",
        "trainer.eval_every=0",
        "trainer.checkpoint_every=0",
        "trainer.export_final=false",
        "trainer.eval_before_training=false",
        "generator.n_samples=2",
        f"generator.max_new_tokens={max_new_tokens}",
        "data.train_size=4",
        "data.eval_size=0",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
        "optim.lr=1e-3",
    ]


def test_every_builtin_env_has_a_script():
    assert set(BUILTIN_ENVS) <= set(EXAMPLE_REPLIES), (
        "add the new env's replies to aloft.gym.envs.EXAMPLE_REPLIES"
    )


@pytest.mark.parametrize("env_id", sorted(BUILTIN_ENVS))
def test_check_env_passes(env_id):
    """The conformance checks (types, determinism, finite rewards, close twice) on each env's own data."""
    cfg, rows = env_rows(env_id, 4)
    check_env(env_id, rows, cfg.env.config)


@pytest.mark.parametrize("env_id", sorted(BUILTIN_ENVS))
def test_token_in_token_out(env_id, tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir)
    cfg, rows = env_rows(env_id, 3)
    replies = EXAMPLE_REPLIES[env_id]
    gen = Generator(
        make_engine("scripted", tokenizer=tokenizer, replies=replies),
        tokenizer,
        limits=EpisodeLimits(max_turns=len(replies), max_total_tokens=100_000),
        default_env_config={**cfg.env.config, "max_turns": len(replies)},
    )
    groups = gen.generate_sync(rows, n=1, sampling=SamplingParams(max_tokens=512), seed=0)
    for row, group in zip(rows, groups, strict=True):
        (t,) = group.trajectories
        assert t.status is not RolloutStatus.ENV_ERROR, t.info
        policy_ids = [i for i, m in zip(t.completion_ids, t.loss_mask, strict=True) if m]
        used = replies[: len(t.info["observation_spans"]) + 1]
        expected = [tok for text in used for tok in gen.engine.tokenize(text)]
        assert policy_ids == expected
        spans = t.info["observation_spans"]
        assert all(t.loss_mask[i] == 0 for s, e in spans for i in range(s, e))
        assert sum(e - s for s, e in spans) + len(policy_ids) == len(t.completion_ids)
        assert all(math.isfinite(r) for r in t.rewards)
        # Replay the same actions on a fresh env: each observation it sends appears exactly once,
        # inside an observation span.
        text = tokenizer.decode(t.completion_ids)
        span_texts = [tokenizer.decode(t.completion_ids[s:e]) for s, e in spans]
        env = make(env_id, config={**cfg.env.config, "max_turns": len(replies)}, extras=row.extras)
        env.reset(row.prompt)
        for k, reply in enumerate(used):
            out = env.step(reply)
            for message in out.observations:
                assert text.count(message["content"]) == 1, message["content"][:80]
                assert message["content"] in span_texts[k]
        env.close()
        if env_id in MULTI_TURN:
            assert spans, f"{env_id}: the scripted tool call got no observation"


@pytest.mark.parametrize("env_id", sorted(BUILTIN_ENVS))
def test_each_env_trains_with_a_tiny_model(env_id, long_tiny_model, tmp_path):
    cfg = load_config(
        None, env_training_overrides(env_id, long_tiny_model, tmp_path, steps=2, max_new_tokens=12)
    )
    final = Trainer(cfg).fit()
    for key in ("reward/mean", "policy/loss", "timing/step_s"):
        assert math.isfinite(final[key]), key
    assert final["mask/env_token_share"] == 0.0
