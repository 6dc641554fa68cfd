"""KL to a reference policy, per token, with Schulman's estimators (http://joschu.net/blog/kl-approx.html).

With samples from the current policy pi and ``log_ratio = log pi - log pi_ref``:

- ``k1 = log_ratio``: unbiased for KL(pi || ref), high variance, can be negative.
- ``k2 = 0.5 * log_ratio ** 2``: low variance, biased; its gradient is the true KL gradient.
- ``k3 = exp(-log_ratio) + log_ratio - 1``: unbiased and always >= 0 (GRPO's choice).

The KL enters training either as a loss term (``kl_penalty="loss"``: the trainer adds
``kl_coef * aggregate_loss(kl_divergence(...), mask, ...)``) or as a reward penalty
(``kl_penalty="reward"``: ``apply_kl_penalty_to_rewards`` before the advantage estimator).
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")
"""Names accepted by ``kl_divergence``."""

LOG_RATIO_LIMIT = 20.0
"""k3 exponentiates the log ratio; clamping it to [-20, 20] keeps a wild token from overflowing."""


def kl_divergence(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str, clamp: float | None = None
) -> torch.Tensor:
    """Per-token KL estimate ``[B, T]`` of the policy (``logprobs``) from the reference (``ref_logprobs``).

    Unmasked: reduce it with ``aggregate_loss`` and the loss mask. Differentiable in ``logprobs``.

    ``clamp`` (k3 only) clamps the estimate to ``[-clamp, clamp]``, as verl and skyrl-train do with
    10. aloft leaves it unclamped by default: a clamped token has no KL gradient, and the tokens
    where k3 passes 10 are those that drifted furthest from the reference, where the penalty
    should pull hardest.
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs and ref_logprobs must have one shape, got {tuple(logprobs.shape)} and "
            f"{tuple(ref_logprobs.shape)}"
        )
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k2":
        return 0.5 * (logprobs - ref_logprobs).pow(2)
    if estimator == "k3":
        ref_log_ratio = (ref_logprobs - logprobs).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
        # exp(r) - 1 - r written with expm1: exact math is >= 0, and exp(r) - r - 1 in float32 rounds
        # to small negatives near r = 0 (-6e-8 was found); expm1(r) never rounds below r.
        k3 = torch.expm1(ref_log_ratio) - ref_log_ratio
        return k3 if clamp is None else k3.clamp(-clamp, clamp)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of: {', '.join(KL_ESTIMATORS)}")


@torch.no_grad()
def apply_kl_penalty_to_rewards(
    rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    coef: float,
    estimator: str,
    clamp: float | None = None,
) -> torch.Tensor:
    """New token rewards ``[B, T]``: ``rewards - coef * KL`` on every policy token, unchanged elsewhere.

    Inputs are not modified and no gradient flows (rewards are targets).
    """
    if rewards.shape != loss_mask.shape:
        raise ValueError(
            f"rewards and loss_mask must have one shape, got {tuple(rewards.shape)} and {tuple(loss_mask.shape)}"
        )
    kl = kl_divergence(logprobs, ref_logprobs, estimator, clamp)
    return rewards - coef * torch.where(loss_mask.bool(), kl, 0.0)
