"""Built-in policy losses: ppo, dual_clip, gspo, cispo.

All share the registry signature ``(logprobs, old_logprobs, advantages, loss_mask, config,
sampler_logprobs=None, *, normalizer=None) -> (loss, metrics)`` with ``[B, T]`` tensors. Gradients flow
through ``logprobs`` only; ``old_logprobs`` and ``advantages`` are treated as constants.

The importance ratio is taken against ``old_logprobs`` (the policy that generated the batch, as the
trainer recomputed or, without recomputation, as the sampler reported). The built-in losses accept
``sampler_logprobs`` for signature compatibility and do not use it; a user loss that corrects the
trainer/sampler mismatch (e.g. truncated importance sampling) reads it.

Masked positions are selected away before any ``exp``, so padding holding garbage (even inf/NaN) changes
neither the loss nor its gradient. Metrics are means over this call's policy tokens:

- ``clip_frac``: share of policy tokens where clipping changed the objective,
- ``approx_kl``: ``mean(old_logprobs - logprobs)``,
- ``ratio_mean``: mean token ratio ``exp(logprobs - old_logprobs)``.
"""

from __future__ import annotations

from typing import Any

import torch

from aloft.algorithms.reductions import LossNormalizer, aggregate_loss, masked_mean
from aloft.algorithms.registry import register_policy_loss

LOG_RATIO_LIMIT = 20.0
"""Log ratios are clamped to [-20, 20] before ``exp`` so a wild token cannot overflow the loss."""


def _check_inputs(*tensors: torch.Tensor) -> None:
    shapes = [tuple(t.shape) for t in tensors]
    if tensors[0].dim() != 2 or len(set(shapes)) != 1:
        raise ValueError(
            "logprobs, old_logprobs, advantages and loss_mask must all be [B, T] with one shape, got "
            + ", ".join(str(s) for s in shapes)
        )


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log(pi / pi_old)`` per token ``[B, T]``, 0 where masked, clamped; grad through ``logprobs``."""
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), 0.0)
    return log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


def _constant_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, advantages.detach(), 0.0)


@torch.no_grad()
def _metrics(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, clipped: torch.Tensor
) -> dict[str, float]:
    log_ratio = torch.where(mask, logprobs.detach() - old_logprobs, 0.0)
    return {
        "clip_frac": masked_mean(clipped.float(), mask).item(),
        "approx_kl": masked_mean(-log_ratio, mask).item(),
        "ratio_mean": masked_mean(log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT).exp(), mask).item(),
    }


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's pessimistic token loss ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`` and where the
    clipped term won (``[B, T]`` each)."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


@register_policy_loss("ppo")
def ppo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    sampler_logprobs: torch.Tensor | None = None,
    *,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017) with asymmetric ``config.clip_low``/``clip_high``.

    Token loss ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``, reduced with
    ``config.loss_reduction``. ``clip_high > clip_low`` is DAPO's clip-higher.
    """
    _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    mask = loss_mask.bool()
    ratio = _log_ratio(logprobs, old_logprobs, mask).exp()
    token_loss, clipped = _clipped_surrogate(
        ratio, _constant_advantages(advantages, mask), config.clip_low, config.clip_high
    )
    loss = aggregate_loss(token_loss, mask, config.loss_reduction, normalizer)
    return loss, _metrics(logprobs, old_logprobs, mask, clipped)


@register_policy_loss("dual_clip")
def dual_clip(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    sampler_logprobs: torch.Tensor | None = None,
    *,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dual-clip PPO (Ye et al. 2020): PPO, plus for ``A < 0`` the token loss is capped at ``-A * c``.

    With a negative advantage and a huge ratio, PPO's loss ``-A r`` grows without bound; the cap
    ``c = config.dual_clip_c`` (> 1) bounds it (and zeroes its gradient). Extra metric
    ``dual_clip_frac``: share of policy tokens where the cap applied; ``clip_frac`` counts both clips.
    """
    _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    if not config.dual_clip_c > 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (it bounds ratios above 1), got {config.dual_clip_c}")
    mask = loss_mask.bool()
    advantages = _constant_advantages(advantages, mask)
    ratio = _log_ratio(logprobs, old_logprobs, mask).exp()
    ppo_loss, ppo_clipped = _clipped_surrogate(ratio, advantages, config.clip_low, config.clip_high)
    cap = -advantages * config.dual_clip_c
    capped = (advantages < 0) & (ppo_loss > cap)
    token_loss = torch.where(capped, cap, ppo_loss)
    loss = aggregate_loss(token_loss, mask, config.loss_reduction, normalizer)
    metrics = _metrics(logprobs, old_logprobs, mask, ppo_clipped | capped)
    metrics["dual_clip_frac"] = masked_mean(capped.float(), mask).item()
    return loss, metrics


@register_policy_loss("gspo")
def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    sampler_logprobs: torch.Tensor | None = None,
    *,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025): clip a sequence-level ratio instead of token ratios.

    ``s_i = exp(mean over policy tokens of log(pi / pi_old))``. The paper's token form
    ``s_it = sg[s_i] * pi(y_t) / sg[pi(y_t)]`` has the value ``s_i`` on every token and the gradient of
    ``s_i`` spread over tokens, and accepts token-level advantages (GSPO-token). Token loss
    ``max(-A s_it, -A clip(s_it, 1 - gspo_clip_low, 1 + gspo_clip_high))``.

    Reduction: always the per-sequence token mean then mean over sequences (``seq_mean_token_mean``),
    as in the paper; ``config.loss_reduction`` is not used. Extra metric ``seq_ratio_mean``.
    """
    _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    mask = loss_mask.bool()
    tokens_per_sequence = mask.sum(-1).clamp(min=1)
    seq_log_ratio = _log_ratio(logprobs, old_logprobs, mask).sum(-1) / tokens_per_sequence
    seq_log_ratio = seq_log_ratio.detach().clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    policy_logprobs = torch.where(mask, logprobs, 0.0)
    # Value: seq_log_ratio on each token; gradient: that of each token's own logprob.
    token_log_ratio = policy_logprobs - policy_logprobs.detach() + seq_log_ratio.unsqueeze(-1)
    token_loss, clipped = _clipped_surrogate(
        token_log_ratio.exp(),
        _constant_advantages(advantages, mask),
        config.gspo_clip_low,
        config.gspo_clip_high,
    )
    loss = aggregate_loss(token_loss, mask, "seq_mean_token_mean", normalizer)
    metrics = _metrics(logprobs, old_logprobs, mask, clipped)
    metrics["seq_ratio_mean"] = masked_mean(seq_log_ratio.exp(), mask.any(-1)).item()
    return loss, metrics


@register_policy_loss("cispo")
def cispo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: Any,
    sampler_logprobs: torch.Tensor | None = None,
    *,
    normalizer: LossNormalizer | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, 2025): REINFORCE weighted by a truncated, stop-gradient importance weight.

    Token loss ``-sg(min(r, 1 + cispo_clip_high)) * A * logprobs``, reduced with
    ``config.loss_reduction``. No lower bound, as in the paper, unless ``config.cispo_clip_low`` is set:
    then the weight is at least ``1 - cispo_clip_low`` (verl clips at ``1 - clip_low`` = 0.8, skyrl-train
    at 1.0 by default, which raises every weight below 1 to 1). Unlike PPO, a clipped token still gets a gradient; only its weight is
    capped. The loss *value* is not a surrogate of the return (it contains ``logprobs``); only its
    gradient is meaningful. ``clip_frac`` is the share of tokens whose weight was truncated.
    """
    _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    mask = loss_mask.bool()
    ratio = _log_ratio(logprobs, old_logprobs, mask).detach().exp()
    cap = 1.0 + config.cispo_clip_high
    floor = None if config.cispo_clip_low is None else 1.0 - config.cispo_clip_low
    weight = ratio.clamp(min=floor, max=cap)
    token_loss = -weight * _constant_advantages(advantages, mask) * torch.where(mask, logprobs, 0.0)
    loss = aggregate_loss(token_loss, mask, config.loss_reduction, normalizer)
    return loss, _metrics(logprobs, old_logprobs, mask, weight != ratio)
