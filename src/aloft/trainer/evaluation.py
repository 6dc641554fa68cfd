"""Eval: mean reward and pass@k of a policy on held-out rows (used by the trainer and `aloft eval`)."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from statistics import fmean

from aloft.algorithms import drop_failed_trajectories
from aloft.rollout import Generator
from aloft.rollout.generator import PromptRow
from aloft.trainer.failures import error_metrics
from aloft.types import SamplingParams, Trajectory, TrajectoryGroup


def is_success(traj: Trajectory) -> bool:
    """A trajectory 'passes' when its env says correct, or (envs without that metric) reward > 0."""
    if "correct" in traj.metrics:
        return traj.metrics["correct"] > 0
    return traj.reward > 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize_groups(groups: Sequence[TrajectoryGroup], prefix: str = "eval/") -> dict[str, float]:
    """Mean reward, pass@k for every k up to the samples per prompt, lengths and env metrics of the
    trajectories that ran; ``error_share``: those that failed (the env or the engine raised), which
    count in no other number. pass@k is over the prompts with at least k samples that ran."""
    trajectories = [t for g in groups for t in g.trajectories]
    ran, failed = drop_failed_trajectories(groups)
    out = error_metrics(trajectories)
    out = {f"{prefix}{name.removeprefix('rollout/')}": value for name, value in out.items()}
    out[f"{prefix}num_prompts"] = float(len(groups))
    trajs = [t for g in ran for t in g.trajectories]
    if not trajs:
        return out
    out[f"{prefix}reward/mean"] = fmean(t.reward for t in trajs)
    out[f"{prefix}completion/mean_len"] = fmean(t.num_policy_tokens for t in trajs)
    for k in range(1, max(len(g.trajectories) for g in ran) + 1):
        counted = [g for g in ran if len(g.trajectories) >= k]
        out[f"{prefix}pass@{k}"] = fmean(
            pass_at_k(len(g.trajectories), sum(map(is_success, g.trajectories)), k) for g in counted
        )
    for name in sorted({m for t in trajs for m in t.metrics}):
        out[f"{prefix}env/{name}"] = fmean(t.metrics.get(name, 0.0) for t in trajs)
    return out


async def evaluate(
    generator: Generator, rows: Sequence[PromptRow], *, n: int, sampling: SamplingParams, seed: int
) -> tuple[dict[str, float], list[TrajectoryGroup]]:
    """Generate ``n`` samples per row and summarise them (eval always uses the same seed).

    Rows may name the eval set they belong to in an ``eval_set`` column (e.g. the same held-out
    questions asked at 5 turns and at 1 turn): each set is then also summarised on its own, under
    ``eval/<set>/...``, beside the summary of all rows.
    """
    groups = await generator.generate(rows, n=n, sampling=sampling, seed=seed, group_prefix="eval")
    metrics = summarize_groups(groups)
    sets = [row.extras.get("eval_set") for row in rows]
    for name in sorted({str(name) for name in sets if name}):
        members = [group for group, member in zip(groups, sets, strict=True) if member == name]
        metrics.update(summarize_groups(members, prefix=f"eval/{name}/"))
    return metrics, groups
