"""DAPO filters and shaping on trajectory groups."""

from __future__ import annotations

import pytest

from aloft.algorithms import (
    apply_soft_overlong_penalty,
    drop_failed_trajectories,
    drop_zero_variance_groups,
    overlong_filter_mask,
    soft_overlong_penalty,
)
from aloft.types import RolloutStatus, Trajectory, TrajectoryGroup


def trajectory(reward=0.0, status=RolloutStatus.STOP, loss_mask=(1,), group_id="g", rewards=None):
    loss_mask = list(loss_mask)
    if rewards is None:
        rewards = [0.0] * len(loss_mask)
        rewards[-1] = reward
    return Trajectory(
        prompt_ids=[1, 2],
        completion_ids=list(range(10, 10 + len(loss_mask))),
        loss_mask=loss_mask,
        sampler_logprobs=[-0.5 if m else 0.0 for m in loss_mask],
        rewards=list(rewards),
        status=status,
        group_id=group_id,
    )


def group(group_id, rewards):
    return TrajectoryGroup(
        group_id=group_id, trajectories=[trajectory(r, group_id=group_id) for r in rewards]
    )


def test_drop_failed_trajectories_removes_failures_and_empty_groups():
    failed = RolloutStatus.ENV_ERROR
    groups = [
        TrajectoryGroup(
            group_id="a", trajectories=[trajectory(1, group_id="a"), trajectory(0, failed, group_id="a")]
        ),
        TrajectoryGroup(group_id="b", trajectories=[trajectory(0, failed, group_id="b")]),
        group("c", [1, 0]),
    ]
    kept, dropped = drop_failed_trajectories(groups)
    assert [g.group_id for g in kept] == ["a", "c"]
    assert [t.reward for t in kept[0].trajectories] == [1.0]
    assert kept[1] is groups[2]  # untouched groups are passed through
    assert [t.group_id for t in dropped] == ["a", "b"] and all(t.failed for t in dropped)
    assert len(groups[0].trajectories) == 2  # the input is not modified


def test_a_failed_sample_neither_adds_nor_removes_a_groups_variance():
    failed = trajectory(0, RolloutStatus.ENV_ERROR)
    same = TrajectoryGroup(group_id="g", trajectories=[trajectory(1), trajectory(1), failed])
    assert same.rewards == [1.0, 1.0] and not same.has_variance
    # A turn-limited sample is the policy's outcome: it keeps its reward.
    cut = TrajectoryGroup(group_id="g", trajectories=[trajectory(1), trajectory(0, RolloutStatus.LENGTH)])
    assert cut.has_variance and not cut.trajectories[1].failed


def test_drop_zero_variance_groups_keeps_informative_groups_in_order():
    groups = [group("a", [1, 0]), group("b", [1, 1]), group("c", [0.5]), group("d", [0, 0, 0.25])]
    kept, dropped = drop_zero_variance_groups(groups)
    assert [g.group_id for g in kept] == ["a", "d"]
    assert dropped == 2


def test_overlong_filter_mask_drops_only_truncated_trajectories():
    statuses = [RolloutStatus.STOP, RolloutStatus.LENGTH, RolloutStatus.ENV_ERROR, RolloutStatus.ABORTED]
    assert overlong_filter_mask([trajectory(status=s) for s in statuses]) == [True, False, True, True]


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        (70, 0.0),  # well inside the budget
        (80, 0.0),  # exactly max_len - buffer_len = 100 - 20
        (90, -0.5),  # halfway through the buffer: -(90 - 80) / 20
        (100, -1.0),  # at max_len: -factor
        (130, -1.0),  # beyond: -factor
    ],
)
def test_soft_overlong_penalty_ramps_linearly_over_the_buffer(length, expected):
    assert soft_overlong_penalty(length, max_len=100, buffer_len=20, factor=1.0) == pytest.approx(expected)


def test_soft_overlong_penalty_scales_with_factor_and_zero_buffer_disables():
    assert soft_overlong_penalty(95, max_len=100, buffer_len=20, factor=2.0) == pytest.approx(-1.5)
    assert soft_overlong_penalty(500, max_len=100, buffer_len=0, factor=1.0) == 0.0
    with pytest.raises(ValueError, match="buffer_len"):
        soft_overlong_penalty(10, max_len=100, buffer_len=200, factor=1.0)


def test_apply_soft_overlong_penalty_counts_policy_tokens_and_hits_the_last_one():
    # Turn 1: 3 policy tokens (reward 1.0 on the last), env observation of 2 tokens, turn 2: 2 policy
    # tokens (reward 0.5 on the last), then a final observation token. 5 policy tokens, 8 in total.
    # max_len 6, buffer 4 -> penalty-free up to 2 tokens; 5 policy tokens -> -(5 - 2) / 4 = -0.75
    # (counting all 8 tokens would have given -1). It lands on index 6, the last *policy* token.
    mask = [1, 1, 1, 0, 0, 1, 1, 0]
    rewards = [0, 0, 1.0, 0, 0, 0, 0.5, 0]
    original = trajectory(loss_mask=mask, rewards=rewards)
    no_policy = trajectory(loss_mask=[0, 0], rewards=[0.0, 0.0])
    groups = [TrajectoryGroup(group_id="g", trajectories=[original, no_policy])]

    (shaped_group,) = apply_soft_overlong_penalty(groups, max_len=6, buffer_len=4, factor=1.0)
    shaped, untouched = shaped_group.trajectories
    assert shaped.rewards == [0, 0, 1.0, 0, 0, 0, pytest.approx(-0.25), 0]
    assert shaped.reward == pytest.approx(0.75)
    assert shaped.metrics["overlong_penalty"] == pytest.approx(-0.75)
    assert untouched.rewards == [0.0, 0.0]
    # The inputs are not mutated.
    assert original.rewards == rewards and "overlong_penalty" not in original.metrics
    assert groups[0].trajectories[0] is original


def test_apply_soft_overlong_penalty_leaves_short_trajectories_alone():
    groups = [group("g", [1.0, 0.0])]
    (shaped,) = apply_soft_overlong_penalty(groups, max_len=100, buffer_len=20, factor=1.0)
    assert shaped.rewards == [1.0, 0.0]
