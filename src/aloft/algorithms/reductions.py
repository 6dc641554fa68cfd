"""Masked statistics and loss reductions that do not depend on how a mini-batch is split.

A mini-batch is often cut into micro-batches for memory (gradient accumulation). Averaging each
micro-batch's token mean and then averaging those means weights tokens unevenly whenever micro-batches
hold different numbers of policy tokens. Instead, every micro-batch divides by the *whole* mini-batch's
counts, carried in a ``LossNormalizer``; the gradients then simply add up. Across data-parallel ranks
the same holds when the normalizer holds the global counts and gradients are summed, not averaged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

LOSS_REDUCTIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
"""Names accepted by ``aggregate_loss`` (and ``config.loss_reduction``)."""


@dataclass(frozen=True, kw_only=True)
class LossNormalizer:
    """Counts for a whole mini-batch, shared by all of its micro-batches."""

    num_tokens: int
    """Policy tokens (``loss_mask == 1``) in the mini-batch."""
    num_sequences: int
    """Sequences holding at least one policy token (all-masked rows, e.g. filtered ones, do not count
    unless ``count_masked_rows``)."""
    max_len: int
    """Constant length for ``seq_mean_token_sum_norm`` (Dr.GRPO), e.g. the generation token budget."""

    def __post_init__(self) -> None:
        if self.num_tokens < 0 or self.num_sequences < 0:
            raise ValueError(
                f"LossNormalizer counts must be >= 0, got num_tokens={self.num_tokens}, "
                f"num_sequences={self.num_sequences}"
            )
        if self.max_len < 1:
            raise ValueError(f"LossNormalizer.max_len must be >= 1, got {self.max_len}")

    @classmethod
    def from_mask(
        cls, mask: torch.Tensor, max_len: int | None = None, *, count_masked_rows: bool = False
    ) -> LossNormalizer:
        """Counts of one ``[B, T]`` loss mask; ``max_len`` defaults to ``T``."""
        return cls.from_masks([mask], max_len=max_len, count_masked_rows=count_masked_rows)

    @classmethod
    def from_masks(
        cls, masks: Sequence[torch.Tensor], max_len: int | None = None, *, count_masked_rows: bool = False
    ) -> LossNormalizer:
        """Counts over several ``[B_i, T_i]`` masks (micro-batches padded separately).

        ``max_len`` defaults to the largest ``T_i``. ``count_masked_rows`` counts rows without a
        policy token in ``num_sequences`` too, as skyrl-train's sequence means divide by the batch size
        (aloft and verl leave such rows, e.g. filtered ones, out).
        """
        if not masks:
            raise ValueError("LossNormalizer.from_masks needs at least one mask")
        num_tokens = 0
        num_sequences = 0
        for mask in masks:
            if mask.dim() != 2:
                raise ValueError(f"loss mask must be [B, T], got shape {tuple(mask.shape)}")
            per_sequence = mask.bool().sum(-1)
            num_tokens += int(per_sequence.sum())
            num_sequences += int(per_sequence.numel() if count_masked_rows else (per_sequence > 0).sum())
        if max_len is None:
            max_len = max(max(int(mask.shape[-1]) for mask in masks), 1)
        return cls(num_tokens=num_tokens, num_sequences=num_sequences, max_len=max_len)


def _check_same_shape(values: torch.Tensor, mask: torch.Tensor) -> None:
    if values.dim() != 2 or values.shape != mask.shape:
        raise ValueError(
            f"values and mask must both be [B, T], got {tuple(values.shape)} and {tuple(mask.shape)}"
        )


def aggregate_loss(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    normalizer: LossNormalizer | None = None,
) -> torch.Tensor:
    """Reduce per-token losses ``[B, T]`` to a scalar over the positions where ``mask`` is 1.

    Modes (``N`` = ``normalizer.num_tokens``, ``S`` = ``normalizer.num_sequences``):

    - ``token_mean``: ``sum(v * m) / N``; every policy token weighs the same (DAPO).
    - ``seq_mean_token_mean``: ``sum_i mean_t(v_it over policy tokens) / S``; every sequence weighs
      the same (GRPO paper).
    - ``seq_mean_token_sum``: ``sum_i sum_t(v_it over policy tokens) / S``; each sequence's token
      sum, averaged over sequences (verl's "seq-mean-token-sum"): a long reply weighs more.
    - ``seq_mean_token_sum_norm``: ``sum(v * m) / (max_len * S)``; a constant divisor, free of length
      bias (Dr.GRPO).

    Masked positions are selected away (never multiplied), so inf/NaN there cannot leak into the loss
    or its gradient. Sequences without policy tokens add 0. With ``normalizer=None`` the counts come
    from this batch's ``mask`` (and ``T`` for ``max_len``).
    """
    _check_same_shape(values, mask)
    if mode not in LOSS_REDUCTIONS:
        raise ValueError(f"unknown loss reduction {mode!r}; choose one of: {', '.join(LOSS_REDUCTIONS)}")
    if normalizer is None:
        normalizer = LossNormalizer.from_mask(mask)
    keep = mask.bool()
    masked = torch.where(keep, values, 0.0)
    num_sequences = max(normalizer.num_sequences, 1)
    if mode == "token_mean":
        return masked.sum() / max(normalizer.num_tokens, 1)
    if mode == "seq_mean_token_mean":
        tokens_per_sequence = keep.sum(-1).clamp(min=1)
        return (masked.sum(-1) / tokens_per_sequence).sum() / num_sequences
    if mode == "seq_mean_token_sum":
        return masked.sum() / num_sequences
    return masked.sum() / (normalizer.max_len * num_sequences)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty); any matching shapes."""
    keep = mask.bool()
    total = torch.where(keep, values, 0.0).sum()
    return total / keep.sum().clamp(min=1)


WHITEN_FORMULAS = ("std_eps", "rsqrt_var_eps")
"""Names accepted by ``masked_whiten`` (and ``config.whiten_formula``)."""

WHITEN_STD_EPS = 1e-6
"""``std_eps``: added to the std before dividing by it (as GRPO's group std everywhere)."""
WHITEN_VAR_EPS = 1e-8
"""``rsqrt_var_eps``: added to the variance under the square root (verl's and skyrl-train's whitening)."""


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, formula: str = "std_eps") -> torch.Tensor:
    """Whiten ``values`` over the positions where ``mask`` is 1; 0 elsewhere (any matching shapes).

    - ``std_eps`` (aloft's default): ``(values - mean) / (std + 1e-6)``, the form of GRPO's group
      normalization, so one convention holds across the package.
    - ``rsqrt_var_eps``: ``(values - mean) * rsqrt(var + 1e-8)``, verl's and skyrl-train's
      ``masked_whiten``. The two agree to ~1e-6 relative when the std is near 1 and part ways when it
      is small (std 1e-4: 1/1.01e-4 against 1/1.41e-4).

    The std is the unbiased (Bessel-corrected, ``n - 1``) one, the same convention as the group std
    of GRPO in this package; with fewer than two masked values it is taken as 0 (the peers raise).
    """
    if formula not in WHITEN_FORMULAS:
        raise ValueError(f"unknown whiten formula {formula!r}; choose one of: {', '.join(WHITEN_FORMULAS)}")
    keep = mask.bool()
    count = keep.sum()
    mean = masked_mean(values, keep)
    centred = torch.where(keep, values - mean, 0.0)
    variance = centred.pow(2).sum() / (count - 1).clamp(min=1)
    if formula == "std_eps":
        return torch.where(keep, centred / (variance.sqrt() + WHITEN_STD_EPS), 0.0)
    return torch.where(keep, centred * torch.rsqrt(variance + WHITEN_VAR_EPS), 0.0)
