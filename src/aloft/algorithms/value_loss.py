"""The critic's clipped value loss (PPO, as in OpenAI baselines)."""

from __future__ import annotations

import torch

from aloft.algorithms.reductions import LossNormalizer, aggregate_loss, masked_mean


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    clip: float,
    normalizer: LossNormalizer | None = None,
    *,
    mode: str = "token_mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """``0.5 * max((V - R)^2, (V_clip - R)^2)`` reduced over policy tokens; all inputs ``[B, T]``.

    ``V_clip = V_old + clamp(V - V_old, -clip, clip)`` keeps the new values near the ones the advantages
    were computed with. Grad flows through ``values``. ``mode`` is an ``aggregate_loss`` reduction.
    Metrics: ``vf_clip_frac`` (share of policy tokens where the clipped error was the larger one) and
    ``value_mean``.
    """
    shapes = {tuple(t.shape) for t in (values, old_values, returns, loss_mask)}
    if values.dim() != 2 or len(shapes) != 1:
        raise ValueError(
            f"values, old_values, returns and loss_mask must all be [B, T] with one shape, got {sorted(shapes)}"
        )
    mask = loss_mask.bool()
    values = torch.where(mask, values, 0.0)
    old_values = torch.where(mask, old_values.detach(), 0.0)
    returns = torch.where(mask, returns.detach(), 0.0)
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)
    unclipped_error = (values - returns).pow(2)
    clipped_error = (clipped_values - returns).pow(2)
    token_loss = 0.5 * torch.maximum(unclipped_error, clipped_error)
    loss = aggregate_loss(token_loss, mask, mode, normalizer)
    with torch.no_grad():
        metrics = {
            "vf_clip_frac": masked_mean((clipped_error > unclipped_error).float(), mask).item(),
            "value_mean": masked_mean(values, mask).item(),
        }
    return loss, metrics
