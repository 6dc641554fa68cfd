"""Forked agent sessions in group statistics (``env=agent``; ``aloft.inference.capture``).

A session whose harness re-templated its history is several trajectories (pieces), each with the
session's reward. Counted as samples, a session that forked k times would weigh k + 1 times in its
group's mean and std. Under the group estimators below a session is one sample: the estimator runs
on one piece per session (its last), and the session's other pieces get that piece's advantage on
their own policy tokens. Other estimators (gae, reinforce++) are token-level and see every piece as
its own sequence.

What is per piece stays per piece: with ``algorithm.kl_penalty=reward`` the session's score is its
last piece's (its KL penalty included, the earlier pieces' not), and eval's pass@k and the step's
``reward/mean`` count pieces as samples (``env/forks`` says how many there were).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aloft.types import Trajectory

__all__ = ["SESSION_ESTIMATORS", "session_leads", "shared_session_advantages"]

SESSION_ESTIMATORS = ("grpo", "dr_grpo", "rloo")
"""Estimators whose advantage is one number per sample, computed from the group's scores."""


def session_leads(trajectories: Sequence[Trajectory]) -> list[int] | None:
    """For each row, the row of its session's last piece (itself for every unforked trajectory);
    None when no session forked."""
    last: dict[str, int] = {}
    for row, t in enumerate(trajectories):
        if t.info.get("forks", 0) and t.info.get("fork") == t.info["forks"]:
            last[t.info["session"]] = row
    if not last:
        return None
    return [
        last.get(t.info.get("session"), row) if t.info.get("forks", 0) else row
        for row, t in enumerate(trajectories)
    ]


def shared_session_advantages(
    estimator: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    group_ids: torch.Tensor,
    algo: Any,
    leads: list[int],
) -> torch.Tensor:
    """``[B, T]`` advantages with one sample per session: ``estimator`` on the lead rows ``[L, T]``,
    each row then given its lead's (per-sample) advantage on its own policy tokens."""
    lead_rows = sorted(set(leads))
    index = torch.tensor(lead_rows, dtype=torch.long)
    lead_advantages, _ = estimator(rewards[index], loss_mask[index], group_ids[index], None, algo)
    mask = loss_mask[index].bool()
    # The value on a lead's first policy token: these estimators give every policy token the same.
    first = mask.float().argmax(dim=1, keepdim=True)
    per_lead = torch.where(mask.any(dim=1), lead_advantages.gather(1, first).squeeze(1), 0.0)
    position = {row: k for k, row in enumerate(lead_rows)}
    per_row = per_lead[torch.tensor([position[lead] for lead in leads], dtype=torch.long)]
    return torch.where(loss_mask.bool(), per_row[:, None].to(lead_advantages.dtype), 0.0)
