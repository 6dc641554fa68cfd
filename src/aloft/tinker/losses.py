"""The losses Tinker names, per datum, as sums over its tokens.

Every loss takes the datum's per-token ``logprobs`` ``[N]`` of its ``target_tokens`` under the
training client's current weights (differentiable) and its loss inputs (``[N]`` arrays aligned with
the model input), and returns the per-token loss ``[N]``; the datum's loss is its sum, and a
``forward_backward`` call's loss (metric ``loss:sum``) is the sum over its datums, as Tinker defines
them. ``logprobs`` in the inputs are the *sampling* logprobs; a ratio is ``exp(logprobs - sampling)``.

``ppo`` and ``cispo`` are aloft's registered losses (``aloft.algorithms``) with Tinker's clip
thresholds turned into aloft's epsilons and a token sum as the reduction; the others are a line each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace

import torch

from aloft.algorithms import LossNormalizer, get_policy_loss
from aloft.tinker.errors import TinkerUserError

CLIP_THRESHOLDS = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0), "gspo": (1.0 - 3e-4, 1.0 + 4e-4)}
"""Default ``(clip_low_threshold, clip_high_threshold)`` bounds of the ratio, overridable in
``loss_fn_config``: ppo's are Tinker's documented 0.8 / 1.2; cispo's the one-sided clip the
tinker-cookbook tutorial gives as Tinker's default since June 2026 (older material says 0.8 / 1.2);
gspo's the GSPO paper's epsilons (Tinker documents none)."""

TokenLoss = Callable[
    [torch.Tensor, Mapping[str, torch.Tensor], torch.Tensor, Mapping[str, float | str]], torch.Tensor
]
"""``(logprobs [B, N], inputs {name: [B, N]}, mask [B, N] bool, config) -> the summed loss`` (a scalar);
rows are datums padded to one length, ``mask`` marks their real positions."""


def _input(inputs: Mapping[str, torch.Tensor], name: str, loss: str) -> torch.Tensor:
    if name not in inputs:
        raise TinkerUserError(
            f"loss {loss!r} needs loss_fn_inputs[{name!r}]; the datum has: {sorted(inputs)}"
        )
    return inputs[name]


def _sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, 0.0).sum()


def cross_entropy(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """``sum(-weights * logprobs)``; ``weights`` default to 1 (any floats: forward_backward_custom sends
    the gradient of the user's loss here as weights)."""
    weights = inputs.get("weights")
    return _sum(-logprobs if weights is None else -weights * logprobs, mask)


def importance_sampling(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """REINFORCE corrected for the sampler: ``sum(-exp(logprobs - sampling_logprobs) * advantages)``."""
    sampling = _input(inputs, "logprobs", "importance_sampling")
    advantages = _input(inputs, "advantages", "importance_sampling")
    log_ratio = torch.where(mask, logprobs - sampling, 0.0)
    return _sum(-torch.exp(log_ratio) * advantages, mask)


def _thresholds(config: Mapping[str, float | str], loss: str) -> tuple[float, float]:
    default_low, default_high = CLIP_THRESHOLDS[loss]
    low = float(config.get("clip_low_threshold", default_low))
    high = float(config.get("clip_high_threshold", default_high))
    if not 0.0 <= low <= 1.0 <= high:
        raise TinkerUserError(
            f"loss {loss!r} needs clip_low_threshold <= 1 <= clip_high_threshold, got {low} and {high}"
        )
    return low, high


_TOKEN_SUM = LossNormalizer(num_tokens=1, num_sequences=1, max_len=1)
"""``token_mean`` over this normalizer divides by 1: aloft's reductions give the token sum."""


def _aloft_loss(
    name: str,
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    algo: SimpleNamespace,
) -> torch.Tensor:
    sampling = _input(inputs, "logprobs", name)
    advantages = _input(inputs, "advantages", name)
    loss, _ = get_policy_loss(name)(logprobs, sampling, advantages, mask, algo, normalizer=_TOKEN_SUM)
    return loss


def ppo(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """PPO's clipped surrogate on the sampling ratio ``r``: ``sum(-min(r A, clip(r, low, high) A))``
    (aloft's ``ppo`` with ``clip_low = 1 - low`` and ``clip_high = high - 1``)."""
    low, high = _thresholds(config, "ppo")
    algo = SimpleNamespace(clip_low=1.0 - low, clip_high=high - 1.0, loss_reduction="token_mean")
    return _aloft_loss("ppo", logprobs, inputs, mask, algo)


def cispo(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """CISPO: ``sum(-sg(clip(r, low, high)) * A * logprobs)``, the weight clipped on both sides as
    Tinker does (aloft's ``cispo`` with ``cispo_clip_low = 1 - low``, ``cispo_clip_high = high - 1``)."""
    low, high = _thresholds(config, "cispo")
    algo = SimpleNamespace(cispo_clip_low=1.0 - low, cispo_clip_high=high - 1.0, loss_reduction="token_mean")
    return _aloft_loss("cispo", logprobs, inputs, mask, algo)


def dro(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """DRO: ``sum(-(logprobs * A - beta / 2 * (logprobs - sampling_logprobs) ** 2))`` over every real
    position, as Tinker's docs write it. ``beta`` is required (the docs give no default; their example
    uses 0.05). As written, the penalty also acts where the advantage is 0: a prompt position padded
    with a sampling logprob of 0 is pulled towards logprob 0 unless its datum leaves it out."""
    if "beta" not in config:
        raise TinkerUserError(
            "loss 'dro' needs loss_fn_config['beta'] (Tinker's docs use 0.05 in their example)"
        )
    beta = float(config["beta"])
    sampling = _input(inputs, "logprobs", "dro")
    advantages = _input(inputs, "advantages", "dro")
    return _sum(-(logprobs * advantages - 0.5 * beta * (logprobs - sampling) ** 2), mask)


def gspo(
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """GSPO-token: each datum's sequence ratio ``s = exp(mean over sequence_ratio_mask of
    (sg(logprobs) - sampling_logprobs))``; token t carries ``s`` with its own logprob's gradient,
    ``s_t = s * exp(logprobs - sg(logprobs))``, and PPO's clipped surrogate is summed over tokens.

    Not aloft's registered ``gspo``: that one takes the ratio over the tokens it trains on and
    reduces by per-sequence means, where Tinker's ratio has its own mask and its loss is a token sum."""
    sampling = _input(inputs, "logprobs", "gspo")
    advantages = _input(inputs, "advantages", "gspo")
    in_ratio = (_input(inputs, "sequence_ratio_mask", "gspo") != 0) & mask
    if not bool(in_ratio.any(-1)[mask.any(-1)].all()):
        raise TinkerUserError("loss 'gspo' needs at least one nonzero sequence_ratio_mask position per datum")
    low, high = _thresholds(config, "gspo")
    token_log_ratio = torch.where(in_ratio, logprobs.detach() - sampling, 0.0)
    sequence_log_ratio = token_log_ratio.sum(-1) / in_ratio.sum(-1).clamp(min=1)
    own = torch.where(mask, logprobs - logprobs.detach(), 0.0)
    ratio = torch.exp(sequence_log_ratio.unsqueeze(-1) + own)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages)
    return _sum(-surrogate, mask)


LOSSES: dict[str, TokenLoss] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
    "gspo": gspo,
}
"""Tinker loss name -> per-token loss."""


REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens",),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
    "gspo": ("target_tokens", "logprobs", "advantages", "sequence_ratio_mask"),
}
"""The ``loss_fn_inputs`` each loss reads (``weights`` is optional for cross_entropy)."""


def check_loss_inputs(name: str, inputs: list[Mapping[str, object]]) -> None:
    """Refuse, naming the datum and the key, a call whose datums lack an input its loss needs."""
    token_loss(name)
    for index, datum in enumerate(inputs):
        missing = [key for key in REQUIRED_INPUTS[name] if key not in datum]
        if missing:
            raise TinkerUserError(
                f"loss {name!r} needs loss_fn_inputs{missing}; datum {index} has: {sorted(datum)}"
            )


NOT_SERVED: dict[str, str] = {
    "stable_reinforce": (
        "loss_fn 'stable_reinforce' is not served by aloft: its objective reads stability information "
        "Tinker's own sampler records (sequence_id) and Tinker does not publish it; for off-policy "
        "samples use 'importance_sampling', 'ppo' or 'cispo'"
    ),
}
"""Losses Tinker names that aloft refuses on purpose, with why and what to use instead."""


def token_loss(name: str) -> TokenLoss:
    """The per-token loss Tinker calls ``name``, or a ``TinkerUserError`` that lists the ones served."""
    if name in NOT_SERVED:
        raise TinkerUserError(NOT_SERVED[name])
    if name not in LOSSES:
        raise TinkerUserError(f"loss_fn {name!r} is not served by aloft; choose one of: {', '.join(LOSSES)}")
    return LOSSES[name]
