"""Corrections for training on samples drawn by an older policy (or a mismatched sampler).

The sampler (an inference engine, possibly several policy versions behind) reported
``sampler_logprobs``; the trainer computes ``proximal_logprobs`` under the policy it is about to
update. Each returns per-token weights ``w`` ``[B, T]`` (constants, no gradient) that multiply the
advantages: every built-in policy loss is positively homogeneous in the advantage (scaling A by
w >= 0 scales that token's loss by w), so this is importance weighting for all of them.

- ``tis_token``: ``w_t = min(r_t, cap)`` with ``r_t = exp(proximal_t - sampler_t)`` (truncated
  importance sampling, Yao et al. 2025 "Your efficient RL framework secretly brings you off-policy RL").
- ``tis_sequence``: ``w = min(prod_t r_t, cap)`` for every token of a sequence.
- ``geo_mask``: ``w = 1`` if the sequence's geometric-mean ratio ``exp(mean_t log r_t)`` lies in
  ``[low, high]``, else ``0``: sequences the sampler drew too differently are left out.
"""

from __future__ import annotations

import torch

OFF_POLICY_CORRECTIONS = ("none", "tis_token", "tis_sequence", "geo_mask")


def off_policy_weights(
    proximal_logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str,
    *,
    cap: float = 2.0,
    low: float = 0.98,
    high: float = 1.02,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weights ``[B, T]`` (1 where ``mode="none"``; 0 on masked positions) and metrics."""
    if mode not in OFF_POLICY_CORRECTIONS:
        raise ValueError(f"unknown off-policy correction {mode!r}; choose one of {OFF_POLICY_CORRECTIONS}")
    mask = loss_mask.float()
    log_ratio = (proximal_logprobs.detach().float() - sampler_logprobs.float()) * mask
    tokens = mask.sum().clamp(min=1)
    metrics = {"off_policy/abs_log_ratio": float(log_ratio.abs().sum() / tokens)}
    if mode == "none":
        return mask, metrics
    if mode == "tis_token":
        ratio = log_ratio.exp()
        weights = ratio.clamp(max=cap) * mask
        metrics["off_policy/truncated_share"] = float(((ratio > cap).float() * mask).sum() / tokens)
    else:
        per_sequence = mask.sum(-1)
        has_tokens = per_sequence > 0
        if mode == "tis_sequence":
            ratio = log_ratio.sum(-1).clamp(max=80).exp()  # exp(80) is still finite in float32
            sequence_weight = ratio.clamp(max=cap)
            metrics["off_policy/truncated_share"] = float(
                (ratio > cap)[has_tokens].float().mean().nan_to_num()
            )
        else:
            geometric = (log_ratio.sum(-1) / per_sequence.clamp(min=1)).exp()
            keep = (geometric >= low) & (geometric <= high)
            sequence_weight = keep.float()
            metrics["off_policy/masked_share"] = float((~keep)[has_tokens].float().mean().nan_to_num())
        weights = sequence_weight[:, None] * mask
    metrics["off_policy/mean_weight"] = float(weights.sum() / tokens)
    return weights, metrics
