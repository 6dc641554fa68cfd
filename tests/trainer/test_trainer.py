"""End-to-end runs of the synchronous trainer on a tiny model: every layer real."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aloft.config import load_config
from aloft.models.compute_thread import on_compute_thread
from aloft.tracking import read_metrics
from aloft.trainer import Trainer
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS
from tests.trainer import envs  # noqa: F401  (registers the test envs)

BASE = [
    "data.builder=arithmetic",
    "data.train_size=64",
    "data.eval_size=8",
    "generator.max_new_tokens=8",
    "generator.max_total_tokens=8",
    "generator.temperature=1.0",
    "generator.n_samples=4",
    "trainer.prompts_per_step=4",
    "trainer.eval_every=0",
    "trainer.checkpoint_every=0",
    "trainer.export_final=false",
]


def run(overrides: list[str]) -> tuple[Trainer, dict[str, float], list[dict]]:
    cfg = load_config(None, [*BASE, *overrides])
    trainer = Trainer(cfg)
    final = trainer.fit()
    return trainer, final, read_metrics(trainer.c.run_dir / "metrics.jsonl")


def test_reward_rises_on_an_easy_reward(tiny_overrides):
    """GRPO on a random tiny model: the share of digits in its replies climbs within seconds.

    60 steps (~8 s): at 30 the climb is reliable but its speed depends on the seed and the CPU.
    """
    _, _, rows = run(
        [
            *tiny_overrides,
            "env=test_digits",
            "trainer.max_steps=60",
            "optim.lr=3e-3",
            "trainer.prompts_per_step=8",
            "trainer.eval_before_training=false",
        ]
    )
    steps = [r for r in rows if "reward/mean" in r]
    first = sum(r["reward/mean"] for r in steps[:5]) / 5
    last = sum(r["reward/mean"] for r in steps[-5:]) / 5
    assert last > first + 0.3, (first, last)
    assert last > 0.6


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.advantage=grpo", "algorithm.policy_loss=ppo"],
        [
            "algorithm.advantage=dr_grpo",
            "algorithm.policy_loss=dual_clip",
            "algorithm.loss_reduction=seq_mean_token_sum_norm",
        ],
        [
            "algorithm.advantage=rloo",
            "algorithm.policy_loss=gspo",
            "algorithm.loss_reduction=seq_mean_token_mean",
        ],
        ["algorithm.advantage=reinforce++", "algorithm.policy_loss=cispo"],
        ["algorithm.advantage=reinforce++_baseline", "algorithm.policy_loss=ppo", "algorithm.clip_high=0.28"],
        [
            "algorithm.kl_coef=0.1",
            "algorithm.kl_estimator=k3",
            "algorithm.kl_penalty=loss",
            "algorithm.entropy_coef=0.01",
        ],
        ["algorithm.kl_coef=0.1", "algorithm.kl_estimator=k1", "algorithm.kl_penalty=reward"],
        ["algorithm.ppo_epochs=2", "algorithm.mini_batches=2", "optim.micro_batch_size=3"],
        [
            "algorithm.dynamic_sampling=true",
            "algorithm.overlong_filter=true",
            "algorithm.overlong_buffer_len=4",
            "generator.stop=[e]",  # some replies end early: the overlong filter must not mask them all
        ],
        ["algorithm.advantage=gae", "critic.enabled=true", "algorithm.gamma=1.0", "algorithm.lam=0.95"],
        ["model.lora_rank=4", "model.lora_target_modules=[q_proj,v_proj]", "optim.lr=1e-3"],
        ["model.gradient_checkpointing=true", "optim.schedule=cosine", "optim.warmup_steps=1"],
    ],
    ids=[
        "grpo-ppo",
        "drgrpo-dualclip",
        "rloo-gspo",
        "rpp-cispo",
        "rppb-cliphigher",
        "kl-loss-entropy",
        "kl-reward",
        "epochs-minibatches",
        "dapo-filters",
        "ppo-critic",
        "lora",
        "gradckpt-cosine",
    ],
)
def test_every_algorithm_trains(tiny_overrides, overrides):
    """A few steps of each estimator/loss/option: finite metrics and every trainable weight moves."""
    cfg = load_config(
        None, [*BASE, *tiny_overrides, "env=test_digits", "trainer.max_steps=2", "optim.lr=1e-3", *overrides]
    )
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.c.policy.model.named_parameters() if p.requires_grad}
    critic_before = None
    if trainer.c.critic is not None:
        critic_before = {n: p.detach().clone() for n, p in trainer.c.critic.model.named_parameters()}
    final = trainer.fit()
    for key in ("reward/mean", "policy/loss", "policy/grad_norm", "timing/step_s", "throughput/tokens_per_s"):
        assert math.isfinite(final[key]), key
    assert final["mask/env_token_share"] == 0.0
    if "algorithm.dynamic_sampling=true" in overrides:  # every sample drawn, not just the kept groups
        assert math.isfinite(final["sampling/drawn_reward_mean"])
    unchanged = [
        n
        for n, p in trainer.c.policy.model.named_parameters()
        if p.requires_grad and torch.equal(p, before[n])
    ]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"
    if critic_before is not None:
        assert "critic/loss" in final
        moved = [
            n for n, p in trainer.c.critic.model.named_parameters() if not torch.equal(p, critic_before[n])
        ]
        assert "value_head.weight" in moved


def test_run_directory_contents(tiny_overrides):
    """metrics.jsonl, rollouts, checkpoints with retention, config.yaml and an HF export."""
    trainer, final, rows = run(
        [
            *tiny_overrides,
            "trainer.max_steps=4",
            "trainer.checkpoint_every=1",
            "trainer.keep_checkpoints=2",
            "trainer.eval_every=2",
            "trainer.export_final=true",
            "env.config={max_turns: 1}",
        ]
    )
    run_dir = trainer.c.run_dir
    assert (run_dir / "config.yaml").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_3", "step_4"]
    step_rows = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in step_rows] == [1, 2, 3, 4]
    for key in (
        "timing/step_s",
        "timing/generate_s",
        "timing/train_s",
        "throughput/tokens_per_s",
        "policy/entropy",
        "policy/update_kl",
        "policy/update_rel_norm",
        "completion/mean_len",
        "mask/env_token_share",
    ):
        assert key in step_rows[0], key
    eval_rows = [r for r in rows if "eval/reward/mean" in r]
    assert [r["step"] for r in eval_rows] == [0, 2, 4]
    rollout = [json.loads(line) for line in (run_dir / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert len(rollout) == 16 and {"prompt", "completion", "reward", "loss_mask"} <= set(rollout[0])
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(run_dir / "export")
    policy_state = trainer.c.policy.model.state_dict()
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, policy_state[name]), name


def test_multi_turn_masks(tiny_overrides):
    """Multi-turn arithmetic: observations are in the batch but never trained on (failing envs:
    tests/trainer/test_failures.py)."""
    _, final, _ = run(
        [
            *tiny_overrides,
            "trainer.max_steps=1",
            "env.config={max_turns: 3}",
            "generator.max_turns=3",
            "generator.max_total_tokens=80",
        ]
    )
    assert final["completion/turns"] > 1
    assert final["mask/env_token_share"] == 0.0


def test_trainer_logprobs_match_sampler_logprobs(tiny_overrides):
    """fp32 engine and fp32 trainer: recomputed logprobs equal the sampler's (mean |diff| <= 1e-4)."""
    _, final, _ = run(
        [*tiny_overrides, "trainer.max_steps=1", "algorithm.ppo_epochs=2", "generator.temperature=0.7"]
    )
    assert final["logprob/sampler_abs_diff"] <= 1e-4


@pytest.mark.parametrize(
    "lora", [[], ["model.lora_rank=4", "algorithm.kl_coef=0.05"]], ids=["full", "lora-kl"]
)
def test_checkpoint_resume_continues(tiny_overrides, lora):
    """Stopping after step 2 and rerunning with max_steps=4 equals an uninterrupted 4-step run
    (a LoRA run too, whose KL reference is its own base)."""
    common = [
        *tiny_overrides,
        "trainer.checkpoint_every=2",
        "trainer.deterministic=true",
        "env=test_digits",
        "optim.lr=1e-3",
        *lora,
    ]
    _, full, full_rows = run([*common, "trainer.name=full", "trainer.max_steps=4"])
    run([*common, "trainer.name=split", "trainer.max_steps=2"])
    trainer, resumed, resumed_rows = run([*common, "trainer.name=split", "trainer.max_steps=4"])
    assert [r["step"] for r in resumed_rows if "reward/mean" in r] == [1, 2, 3, 4]
    for key in ("reward/mean", "policy/loss", "policy/grad_norm"):
        assert resumed[key] == full[key], key
    weights = POLICY_ADAPTERS if lora else POLICY_WEIGHTS  # a LoRA run checkpoints its adapters alone
    a = load_file(Path(trainer.c.run_dir).parent / "full" / "checkpoints" / "step_4" / weights)
    b = load_file(trainer.c.run_dir / "checkpoints" / "step_4" / weights)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_model_work_outside_the_loop_runs_on_the_compute_thread(tiny_overrides, monkeypatch):
    """Building the workers and engine, checkpoints and weight gathering stay off the main thread: a
    parallel torch op there starts a second OpenMP team that slows training and generation."""
    import aloft.trainer.trainer as trainer_module

    ran_on: dict[str, int] = {}

    def recording(name, function):
        def wrapper(*args, **kwargs):
            ran_on[name] = threading.get_ident()
            return function(*args, **kwargs)

        return wrapper

    for name in ("build_components", "load_checkpoint", "save_checkpoint"):
        monkeypatch.setattr(trainer_module, name, recording(name, getattr(trainer_module, name)))
    run([*tiny_overrides, "trainer.max_steps=1"])
    compute = on_compute_thread(threading.get_ident)
    assert ran_on == dict.fromkeys(("build_components", "load_checkpoint", "save_checkpoint"), compute)
    assert compute != threading.get_ident()


def test_a_learner_and_engine_sharing_a_gpu_take_turns(tiny_overrides):
    """One process, one GPU (``LocalLearners.swap``, on for GPU runs with placement.offload): the
    engine sleeps through every update and the learner's state waits in CPU memory through every
    generation. Exercised here on the CPU, where the moves are no-ops but the turns are real."""
    cfg = load_config(None, [*BASE, *tiny_overrides, "trainer.max_steps=2"])
    trainer = Trainer(cfg)
    learners, engine = trainer.c.learners, trainer.c.engine
    assert not learners.swap  # the CPU: nothing to free
    learners.swap = True
    turns: list[str] = []
    move_to, sleep, wake_up = learners.learner.move_to, engine.sleep, engine.wake_up

    def moved(device):
        turns.append(f"learner to {torch.device(device).type}")
        move_to(device)

    async def slept():
        turns.append("engine sleeps")
        await sleep()

    async def woke():
        turns.append("engine wakes")
        await wake_up()

    learners.learner.move_to, engine.sleep, engine.wake_up = moved, slept, woke
    try:
        trainer.fit()
    finally:
        trainer.c.close()
    one_update = ["engine sleeps", "learner to cpu", "learner to cpu", "engine wakes"]
    assert turns == one_update * 2
