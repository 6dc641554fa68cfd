"""The rollouts file records what the trainer trained each trajectory with, within its size bound."""

from __future__ import annotations

import json
import statistics

import pytest

from aloft.config import load_config
from aloft.trainer import Trainer
from tests.report.conftest import off_the_browser_loop
from tests.trainer.test_every_env import env_training_overrides


def records(run, step: int) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]


def test_each_trajectory_carries_its_advantage_and_the_trainers_logprobs(digits_run):
    for step in (1, 4):
        rows = records(digits_run, step)
        by_group: dict[str, list[dict]] = {}
        for row in rows:
            by_group.setdefault(row["group_id"], []).append(row)
        for group in by_group.values():
            rewards = [r["reward"] for r in group]
            for row in group:
                # GRPO: (reward - the group's mean) / (std + eps), one number for every trained token.
                expected = 0.0 if max(rewards) == min(rewards) else (row["reward"] - statistics.mean(rewards))
                assert isinstance(row["advantage"], float)
                assert (row["advantage"] > 0) == (expected > 0) and (row["advantage"] < 0) == (expected < 0)
                # On-policy, fp32: the trainer's pre-update logprobs are the sampler's.
                trained = [i for i, m in enumerate(row["loss_mask"]) if m]
                gap = max(abs(row["trainer_logprobs"][i] - row["sampler_logprobs"][i]) for i in trained)
                assert gap < 2e-3, gap
            assert sum(r["advantage"] for r in group) == pytest.approx(0.0, abs=1e-3)


def test_rollouts_per_step_keeps_whole_groups(long_tiny_model, tmp_path):
    overrides = env_training_overrides("arithmetic", long_tiny_model, tmp_path, steps=1, max_new_tokens=4)
    overrides += ["trainer.name=bounded", "generator.n_samples=4", "trainer.rollouts_per_step=6"]
    off_the_browser_loop(Trainer(load_config(None, overrides)).fit)
    rows = records(tmp_path / "bounded", 1)
    assert len(rows) == 4 and len({r["group_id"] for r in rows}) == 1  # one whole group of 4, not 6
    assert all(r["trainer_logprobs"] is not None for r in rows)
