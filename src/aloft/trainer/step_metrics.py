"""Per-step rollout metrics: rewards, lengths, statuses, env metrics, and the mask audit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import fmean, pstdev

import torch

from aloft.trainer.failures import error_metrics
from aloft.training import TrainBatch
from aloft.types import RolloutStatus, Trajectory


def rollout_metrics(trajectories: list[Trajectory], failed: Sequence[Trajectory] = ()) -> dict[str, float]:
    """Rewards, lengths, turns and env metrics of the ``trajectories`` trained on; the statuses and
    ``rollout/error_share`` (by source) over those and the ``failed`` ones (never trained on)."""
    out = error_metrics([*trajectories, *failed])
    statuses = Counter(t.status for t in [*trajectories, *failed])
    for status in RolloutStatus:
        out[f"status/{status.value}"] = statuses.get(status, 0) / max(len(trajectories) + len(failed), 1)
    if not trajectories:
        return out
    rewards = [t.reward for t in trajectories]
    lengths = [t.num_policy_tokens for t in trajectories]
    out |= {
        "reward/mean": fmean(rewards),
        "reward/std": pstdev(rewards),
        "reward/max": max(rewards),
        "completion/mean_len": fmean(lengths),
        "completion/max_len": float(max(lengths)),
        "completion/turns": fmean(t.info.get("turns", 1) for t in trajectories),
    }
    for name in sorted({m for t in trajectories for m in t.metrics}):
        out[f"env/{name}"] = fmean(t.metrics.get(name, 0.0) for t in trajectories)
    return out


def env_token_share(trajectories: list[Trajectory], batch: TrainBatch) -> float:
    """Share of trained tokens (batch.loss_mask == 1) that the env wrote. Must be 0.

    Checked against the generator's own record of where observations sit (``observation_spans``),
    independently of the loss mask it also built, so an off-by-one in collation or masking shows up.
    """
    env_tokens = torch.zeros_like(batch.loss_mask)
    for row, traj in enumerate(trajectories):
        for start, end in traj.info.get("observation_spans", []):
            env_tokens[row, start:end] = 1
    trained = batch.loss_mask.sum()
    return float((env_tokens * batch.loss_mask).sum() / trained.clamp(min=1))


def sampler_logprob_diff(train_logprobs: torch.Tensor, batch: TrainBatch) -> float:
    """Mean |trainer logprob - sampler logprob| over policy tokens."""
    mask = batch.loss_mask
    return float(((train_logprobs - batch.sampler_logprobs).abs() * mask).sum() / mask.sum().clamp(min=1))


def staleness_metrics(trajectories: list[Trajectory], version: int) -> dict[str, float]:
    """How many policy versions old the samples are when ``version`` trains on them (0: on-policy)."""
    ages = [version - t.policy_version for t in trajectories]
    return {"async/staleness_mean": fmean(ages), "async/staleness_max": float(max(ages))}
