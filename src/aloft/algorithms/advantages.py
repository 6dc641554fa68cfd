"""Built-in advantage estimators: gae, grpo, dr_grpo, rloo, reinforce++, reinforce++_baseline.

All share the registry signature ``(rewards, loss_mask, group_ids, values, config) -> (advantages,
returns)`` with ``[B, T]`` rewards/mask/values and ``[B]`` group ids, and return ``[B, T]`` tensors that
are 0 wherever ``loss_mask`` is 0. Rewards at masked positions are ignored (rewards belong on policy
tokens). Advantages are training targets, so estimators run without autograd.

Multi-turn sequences interleave policy tokens with env observation tokens. The token-level recursions
(GAE, return-to-go) run over policy tokens only: an observation token is not a time step, so it neither
discounts nor carries a value.

Std convention: every std here (GRPO's group std, the batch whitening of reinforce++) is the unbiased
one (divide by ``n - 1``), as ``torch.std`` computes by default and as verl/TRL use for GRPO. Batch
whitening follows ``config.whiten_formula`` (see ``masked_whiten``).

Where these differ from verl and skyrl-train (a group of one, whitening, GAE whitening), the config
keys that give the peers' behaviour are listed in docs/reference/conventions.md.

Ties: under ``grpo``, ``dr_grpo`` and ``rloo`` a group whose samples all scored the same gets an
advantage of exactly 0, whatever the value, the group size and the rewards' dtype (group statistics
are taken in float64, and tied groups are set to 0). A group of one sample is tied too, unless
``config.group_of_one == "score"``: then it gets the peers' advantage, its score (over ``1 + 1e-6``
under grpo with the std division, as verl and skyrl-train take a lone sample's mean as 0 and std as 1). Taken in the rewards' dtype, as verl and
skyrl-train do, six rewards of 0.3 leave an ulp that the std division turns into 0.029 (fp32) or
0.91 (bf16) per token under grpo (measured on aloft's earlier code, which did the same).
"""

from __future__ import annotations

from typing import Any

import torch

from aloft.algorithms.reductions import WHITEN_STD_EPS, masked_whiten
from aloft.algorithms.registry import register_advantage_estimator

EPS = WHITEN_STD_EPS
"""Added to a group std before dividing by it."""

GROUP_OF_ONE = ("zero", "score")
"""Values of ``config.group_of_one``: a lone sample's advantage is 0, or its score (the peers')."""


def _check_inputs(rewards: torch.Tensor, loss_mask: torch.Tensor, group_ids: torch.Tensor) -> None:
    if rewards.dim() != 2 or loss_mask.shape != rewards.shape:
        raise ValueError(
            f"rewards and loss_mask must both be [B, T], got {tuple(rewards.shape)} and "
            f"{tuple(loss_mask.shape)}"
        )
    if group_ids.shape != rewards.shape[:1]:
        raise ValueError(f"group_ids must be [B] = [{rewards.shape[0]}], got shape {tuple(group_ids.shape)}")


def _masked_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    return torch.where(mask, rewards, 0.0)


def _broadcast(per_sequence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, T]``: the value on every policy token, 0 elsewhere."""
    return torch.where(mask, per_sequence.unsqueeze(-1), 0.0)


def _group_sums(per_sequence: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each sequence, the sum of ``per_sequence`` over its group and the group's size (both ``[B]``)."""
    _, group_index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(group_index.max()) + 1 if group_index.numel() else 0
    sums = per_sequence.new_zeros(num_groups).index_add_(0, group_index, per_sequence)
    sizes = per_sequence.new_zeros(num_groups).index_add_(0, group_index, torch.ones_like(per_sequence))
    return sums[group_index], sizes[group_index]


def _scores(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` row sums of the policy tokens' rewards, in float64 whatever the rewards' dtype: group
    statistics taken in bf16 (or fp32) put rounding error where a tied group must get exactly 0."""
    return torch.where(mask, rewards.to(torch.float64), 0.0).sum(-1)


def _tied(per_sequence: torch.Tensor, group_ids: torch.Tensor, group_of_one: str) -> torch.Tensor:
    """``[B]`` bool: the sequence's group scored every sample the same (its advantage is exactly 0:
    a mean of equal numbers can still differ from them by an ulp, and GRPO divides that by ~1e-6).

    A group of one sample counts as tied unless ``group_of_one == "score"`` (the peers' convention).
    """
    if group_of_one not in GROUP_OF_ONE:
        raise ValueError(f"unknown group_of_one {group_of_one!r}; choose one of: {', '.join(GROUP_OF_ONE)}")
    _, group_index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(group_index.max()) + 1 if group_index.numel() else 0
    high = per_sequence.new_full((num_groups,), -torch.inf).scatter_reduce(
        0, group_index, per_sequence, "amax"
    )
    low = per_sequence.new_full((num_groups,), torch.inf).scatter_reduce(0, group_index, per_sequence, "amin")
    tied = (high == low)[group_index]
    if group_of_one == "score":
        sizes = torch.bincount(group_index, minlength=num_groups)[group_index]
        tied &= sizes > 1
    return tied


def _group_mean_std(per_sequence: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Group mean and unbiased group std for each sequence (``[B]`` each); std is 0 for a group of one."""
    sums, sizes = _group_sums(per_sequence, group_ids)
    mean = sums / sizes
    squared_deviation_sums, _ = _group_sums((per_sequence - mean).pow(2), group_ids)
    std = (squared_deviation_sums / (sizes - 1).clamp(min=1)).sqrt()
    return mean, std


def _gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """GAE over the policy tokens of each row, skipping masked positions; ``[B, T]``, 0 where masked.

    ``delta_t = r_t + gamma * V_next - V_t`` and ``A_t = delta_t + gamma * lam * A_next``, where "next" is
    the next *policy* token of the row and ``V``/``A`` after the last policy token are 0. With ``values``
    all 0 and ``lam = 1`` this is the discounted return-to-go.
    """
    batch, length = rewards.shape
    advantages = torch.zeros_like(rewards)
    next_advantage = rewards.new_zeros(batch)
    next_value = rewards.new_zeros(batch)
    for t in reversed(range(length)):
        is_policy = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        # Masked positions leave the carried state untouched: they are not time steps.
        next_advantage = torch.where(is_policy, advantage, next_advantage)
        next_value = torch.where(is_policy, values[:, t], next_value)
        advantages[:, t] = torch.where(is_policy, advantage, 0.0)
    return advantages


def _return_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_next`` over policy tokens; ``[B, T]``, 0 where masked."""
    return _gae(rewards, torch.zeros_like(rewards), mask, gamma, 1.0)


@register_advantage_estimator("gae")
@torch.no_grad()
def gae(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016) with ``config.gamma`` and ``config.lam``.

    Needs critic ``values`` ``[B, T]``. Returns ``advantages`` and ``returns = advantages + values`` (the
    critic's targets). Not whitened unless ``config.whiten_gae`` (verl and skyrl-train always whiten
    GAE advantages over the batch, with ``config.whiten_formula``); ``returns`` are never whitened.
    """
    _check_inputs(rewards, loss_mask, group_ids)
    if values is None:
        raise ValueError(
            "advantage estimator 'gae' needs critic values: enable the critic or pick a critic-free "
            "estimator (grpo, rloo, reinforce++)"
        )
    if values.shape != rewards.shape:
        raise ValueError(f"values must be [B, T] = {tuple(rewards.shape)}, got {tuple(values.shape)}")
    mask = loss_mask.bool()
    rewards = _masked_rewards(rewards, mask)
    values = torch.where(mask, values.to(rewards.dtype), 0.0)
    advantages = _gae(rewards, values, mask, config.gamma, config.lam)
    returns = torch.where(mask, advantages + values, 0.0)
    if config.whiten_gae:
        advantages = masked_whiten(advantages, mask, config.whiten_formula)
    return advantages, returns


def _group_relative(
    rewards: torch.Tensor, loss_mask: torch.Tensor, group_ids: torch.Tensor, divide_by_std: bool, config: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_inputs(rewards, loss_mask, group_ids)
    mask = loss_mask.bool()
    scores = _scores(rewards, mask)
    mean, std = _group_mean_std(scores, group_ids)
    _, sizes = _group_sums(scores, group_ids)
    # A lone sample under group_of_one="score": mean 0 and std 1, as the peers take them.
    mean = torch.where(sizes > 1, mean, 0.0)
    std = torch.where(sizes > 1, std, 1.0)
    advantage = scores - mean
    if divide_by_std:
        advantage = advantage / (std + EPS)
    advantage = torch.where(_tied(scores, group_ids, config.group_of_one), 0.0, advantage)
    return _out(_broadcast(advantage, mask), rewards), _out(_broadcast(scores, mask), rewards)


def _out(x: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """Back from float64: the rewards' dtype, at least float32 (bf16 advantages would round them)."""
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    return x.to(torch.promote_types(dtype, torch.float32))


@register_advantage_estimator("grpo")
@torch.no_grad()
def grpo(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (Shao et al. 2024), the same on every policy token of a sequence.

    ``score`` = row sum of rewards; ``A = (score - group mean) / (group std + 1e-6)`` with the unbiased
    std, or ``score - group mean`` when ``config.norm_adv_by_std`` is False (Dr.GRPO). A group of one
    sample gets 0 (``config.group_of_one="score"``: ``score / (1 + 1e-6)``, verl's and skyrl-train's).
    ``values`` is ignored; ``returns`` is the broadcast score.
    """
    return _group_relative(rewards, loss_mask, group_ids, config.norm_adv_by_std, config)


@register_advantage_estimator("dr_grpo")
@torch.no_grad()
def dr_grpo(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO (Liu et al. 2025): GRPO without the std division, whatever ``config.norm_adv_by_std`` says.

    Pair it with ``loss_reduction="seq_mean_token_sum_norm"`` for the paper's length-unbiased loss.
    """
    return _group_relative(rewards, loss_mask, group_ids, False, config)


@register_advantage_estimator("rloo")
@torch.no_grad()
def rloo(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): ``A_i = score_i - mean_{j != i} score_j``.

    ``score`` = row sum of rewards; a group of one sample gets 0 (``config.group_of_one="score"``: its
    score, as verl's rloo). ``returns`` is the broadcast score.
    """
    _check_inputs(rewards, loss_mask, group_ids)
    mask = loss_mask.bool()
    scores = _scores(rewards, mask)
    sums, sizes = _group_sums(scores, group_ids)
    others = sizes - 1
    leave_one_out_mean = (sums - scores) / others.clamp(min=1)
    advantage = scores - leave_one_out_mean  # a lone sample: its score (the mean of no others is 0)
    advantage = torch.where(_tied(scores, group_ids, config.group_of_one), 0.0, advantage)
    return _out(_broadcast(advantage, mask), rewards), _out(_broadcast(scores, mask), rewards)


@register_advantage_estimator("reinforce++")
@torch.no_grad()
def reinforce_plus_plus(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): return-to-go with ``config.gamma`` over policy tokens, whitened over the batch.

    ``G_t = r_t + gamma * G_next`` (next policy token of the row), then ``A = (G - mean) / (std + 1e-6)``
    with mean and unbiased std over every policy token in the batch (or verl's form, see
    ``config.whiten_formula``). ``returns`` is the un-whitened G.
    """
    _check_inputs(rewards, loss_mask, group_ids)
    mask = loss_mask.bool()
    returns = _return_to_go(_masked_rewards(rewards, mask), mask, config.gamma)
    return masked_whiten(returns, mask, config.whiten_formula), returns


@register_advantage_estimator("reinforce++_baseline")
@torch.no_grad()
def reinforce_plus_plus_baseline(
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    values: torch.Tensor | None,
    config: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (OpenRLHF): subtract the group mean score, then proceed as reinforce++.

    The group mean of the scores (row sums of rewards) is subtracted from the reward on each sequence's
    last policy token; return-to-go and batch whitening follow as in reinforce++. ``returns`` is the
    return-to-go of the original rewards (no baseline), so it reads as what the episode earned.
    """
    _check_inputs(rewards, loss_mask, group_ids)
    mask = loss_mask.bool()
    rewards = _masked_rewards(rewards, mask)
    group_mean, _ = _group_mean_std(rewards.sum(-1), group_ids)
    positions = torch.arange(rewards.shape[-1], device=rewards.device)
    last_policy_position = torch.where(mask, positions, -1).max(-1).values  # -1: no policy token
    is_last_policy_token = mask & (positions == last_policy_position.unsqueeze(-1))
    centred = rewards - torch.where(is_last_policy_token, group_mean.unsqueeze(-1), 0.0)
    advantages = masked_whiten(_return_to_go(centred, mask, config.gamma), mask, config.whiten_formula)
    return advantages, _return_to_go(rewards, mask, config.gamma)
