"""Mini-batches hold whole groups and every group of a step, whatever the group count."""

from __future__ import annotations

import pytest
import torch

from aloft.algorithms import register_policy_loss
from aloft.algorithms.policy_losses import ppo
from aloft.config import load_config
from aloft.trainer.learner import build_learner, group_mini_batches
from aloft.types import RolloutStatus, Trajectory, TrajectoryGroup

SEEN: list[tuple[object, float]] = []
"""(normalizer, policy tokens of the micro-batch) for every loss call of the recording loss."""


@register_policy_loss("test_record_normalizer")
def record_normalizer(
    logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None
):
    SEEN.append((normalizer, float(loss_mask.sum())))
    return ppo(logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs, normalizer=normalizer)


@pytest.mark.parametrize("num_groups,n", [(7, 2), (8, 2), (7, 3), (10, 4), (2, 4), (1, 1), (5, 5)])
def test_every_group_lands_in_exactly_one_mini_batch_as_evenly_as_the_count_allows(num_groups, n):
    group_ids = torch.arange(num_groups).repeat_interleave(3)  # 3 rows a group, groups contiguous
    batches = group_mini_batches(group_ids, num_groups, n, seed=11)
    rows = sorted(r for b in batches for r in b)
    assert rows == list(range(len(group_ids)))  # every row once: nothing dropped, nothing twice
    groups_per_batch = [{int(group_ids[r]) for r in b} for b in batches]
    for b, groups in zip(batches, groups_per_batch):
        assert len(b) == 3 * len(groups)  # whole groups only
    sizes = sorted(len(g) for g in groups_per_batch)
    assert len(batches) == min(n, num_groups)
    assert sizes[-1] - sizes[0] <= 1, sizes


def test_mini_batches_follow_the_seed_and_change_between_epochs():
    group_ids = torch.arange(9)
    assert group_mini_batches(group_ids, 9, 2, seed=1) == group_mini_batches(group_ids, 9, 2, seed=1)
    assert group_mini_batches(group_ids, 9, 2, seed=1) != group_mini_batches(group_ids, 9, 2, seed=2)


def _trajectory(group: int, sample: int) -> Trajectory:
    """Distinct lengths per group, so each mini-batch's token count says which groups it held."""
    n = 2 + group + sample
    return Trajectory(
        prompt_ids=[5 + group, 6, 7],
        completion_ids=[10 + (group + k) % 20 for k in range(n)],
        loss_mask=[1] * n,
        sampler_logprobs=[-1.0] * n,
        rewards=[0.0] * (n - 1) + [float(sample)],
        status=RolloutStatus.STOP,
        group_id=f"g{group}",
    )


def test_seven_groups_in_two_mini_batches_train_all_seven_with_per_mini_batch_normalization(
    tiny_overrides,
):
    """7 groups (a step where one of 8 prompts failed) and ``algorithm.mini_batches=2``: both
    optimizer steps run, together on every policy token, each normalized over its own tokens."""
    cfg = load_config(
        None,
        [
            *tiny_overrides,
            "data.builder=arithmetic",
            "generator.n_samples=2",
            "trainer.prompts_per_step=8",
            "algorithm.mini_batches=2",
            "algorithm.policy_loss=test_record_normalizer",
        ],
    )
    learner = build_learner(cfg)
    groups = [
        TrajectoryGroup(group_id=f"g{g}", trajectories=[_trajectory(g, s) for s in range(2)])
        for g in range(7)
    ]
    total_tokens = sum(sum(t.loss_mask) for g in groups for t in g.trajectories)
    SEEN.clear()
    learner.train_on(groups, step=0)

    per_normalizer: dict[int, tuple[object, float]] = {}
    for normalizer, tokens in SEEN:
        _, seen = per_normalizer.get(id(normalizer), (normalizer, 0.0))
        per_normalizer[id(normalizer)] = (normalizer, seen + tokens)
    assert len(per_normalizer) == 2  # two optimizer steps
    for normalizer, tokens in per_normalizer.values():
        assert normalizer.num_tokens == tokens  # a mini-batch is normalized over its own tokens
    assert sum(n.num_tokens for n, _ in per_normalizer.values()) == total_tokens  # all 7 groups
