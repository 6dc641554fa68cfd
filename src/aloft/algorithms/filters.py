"""Filters and shaping on trajectory groups before they become tensors (DAPO, Yu et al. 2025), and
the removal of failed trajectories.

Torch-free: these work on ``aloft.types`` objects. The trainer decides when to call them (and runs
DAPO's refill loop for dynamic sampling).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from aloft.types import RolloutStatus, Trajectory, TrajectoryGroup


def drop_failed_trajectories(
    groups: Iterable[TrajectoryGroup],
) -> tuple[list[TrajectoryGroup], list[Trajectory]]:
    """Remove every failed trajectory (the env or the engine raised) from its group; return
    ``(groups, failed)``. A group left empty is dropped; order is kept.

    Why remove the sample and keep its group: the group's other samples are valid draws for the
    same prompt, so their advantages are computed among themselves (GRPO's mean and std over the
    samples that ran), exactly as if the failed sample had never been drawn. Dropping the whole
    group would waste them; keeping the failure at reward 0 would bias every advantage in it.
    """
    kept: list[TrajectoryGroup] = []
    failed: list[Trajectory] = []
    for group in groups:
        ran = [t for t in group.trajectories if not t.failed]
        failed += [t for t in group.trajectories if t.failed]
        if len(ran) == len(group.trajectories):
            kept.append(group)
        elif ran:
            kept.append(dataclasses.replace(group, trajectories=ran))
    return kept, failed


def drop_zero_variance_groups(groups: Iterable[TrajectoryGroup]) -> tuple[list[TrajectoryGroup], int]:
    """DAPO dynamic sampling: keep the groups whose rewards differ; return ``(kept, num_dropped)``.

    A group where every sample got the same reward (or a group of one) has zero group-relative
    advantage and would only dilute the batch. Order is kept.
    """
    kept: list[TrajectoryGroup] = []
    dropped = 0
    for group in groups:
        if group.has_variance:
            kept.append(group)
        else:
            dropped += 1
    return kept, dropped


def overlong_filter_mask(trajectories: Sequence[Trajectory]) -> list[bool]:
    """DAPO overlong filtering: ``True`` = keep in the loss; ``False`` for truncated (status LENGTH).

    A truncated answer's reward says little about its quality; the trainer zeroes those rows' loss mask.
    """
    return [t.status != RolloutStatus.LENGTH for t in trajectories]


def soft_overlong_penalty(num_completion_tokens: int, max_len: int, buffer_len: int, factor: float) -> float:
    """DAPO soft overlong punishment for a completion of ``num_completion_tokens`` tokens.

    0 up to ``max_len - buffer_len`` tokens, then linearly down to ``-factor`` at ``max_len``, and
    ``-factor`` beyond. ``buffer_len == 0`` disables the penalty (always 0).
    """
    if buffer_len < 0 or buffer_len > max_len:
        raise ValueError(
            f"overlong buffer_len must be in [0, max_len={max_len}], got {buffer_len}: "
            "lower overlong_buffer_len or raise the token budget"
        )
    if buffer_len == 0:
        return 0.0
    penalty_free_len = max_len - buffer_len
    if num_completion_tokens <= penalty_free_len:
        return 0.0
    if num_completion_tokens <= max_len:
        return -factor * (num_completion_tokens - penalty_free_len) / buffer_len
    return -factor


def _last_policy_index(loss_mask: Sequence[int]) -> int | None:
    for index in range(len(loss_mask) - 1, -1, -1):
        if loss_mask[index]:
            return index
    return None


def apply_soft_overlong_penalty(
    group_list: Iterable[TrajectoryGroup], max_len: int, buffer_len: int, factor: float
) -> list[TrajectoryGroup]:
    """Add ``soft_overlong_penalty`` to each trajectory's last policy-token reward.

    The length is the number of policy tokens (env observations do not count against the budget).
    Returns new ``TrajectoryGroup``/``Trajectory`` objects (inputs are left untouched; token lists are
    shared, ``rewards`` and ``metrics`` are new) with the penalty recorded as
    ``metrics["overlong_penalty"]``. Trajectories without policy tokens are passed on unchanged.
    """
    result: list[TrajectoryGroup] = []
    for group in group_list:
        trajectories: list[Trajectory] = []
        for trajectory in group.trajectories:
            last = _last_policy_index(trajectory.loss_mask)
            if last is None:
                trajectories.append(trajectory)
                continue
            penalty = soft_overlong_penalty(trajectory.num_policy_tokens, max_len, buffer_len, factor)
            rewards = list(trajectory.rewards)
            rewards[last] += penalty
            trajectories.append(
                dataclasses.replace(
                    trajectory,
                    rewards=rewards,
                    metrics={**trajectory.metrics, "overlong_penalty": penalty},
                )
            )
        result.append(dataclasses.replace(group, trajectories=trajectories))
    return result
