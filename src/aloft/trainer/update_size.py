"""How far one step's update moved the policy: ``policy/update_kl`` and ``policy/update_rel_norm``.

The clipping metrics cannot say it: with one epoch and one mini-batch the update is exactly
on-policy, its ratio is ``exp(logprob - logprob.detach()) = 1``, and ``policy/approx_kl``,
``policy/clip_frac`` and ``policy/ratio_mean`` are 0, 0 and 1 by construction (the learner leaves
them out there). These two are measured around the step's optimizer steps instead:

- ``policy/update_kl``: KL(policy before || policy after), per policy token, on a fixed subsample of
  the step's own batch (``trainer.update_kl_rows`` rows, evenly spaced). The tokens were sampled
  from the policy before the update, so the k3 estimator ``exp(d) - 1 - d``, ``d = logprob_after -
  logprob_before``, is unbiased and never negative. It costs one forward pass of those rows after
  the update. Before it, the logprobs come from the old logprobs the learner computed anyway, or
  from the update's own forward (one process, exactly on-policy); only data-parallel ranks, which
  each record their own rows, run a forward of the probe rows before the update too.
- ``policy/update_rel_norm``: ``||theta_after - theta_before|| / ||theta_before||`` over the trained
  parameters (LoRA's A and B, or every weight). Each rank keeps a copy of its own part of them during
  the update: tiny for LoRA, one more copy of the weights for a full fine-tune
  (``trainer.update_rel_norm=false`` turns it off). Sums of squares are added over ranks, each
  element counted once: a shard or partition on its rank, a parameter every rank holds whole on
  rank 0 (``_own_part``), so FSDP2, ZeRO and Ulysses give one process's figure.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from aloft.training import TrainBatch

ZERO_ON_POLICY = ("policy/approx_kl", "policy/clip_frac", "policy/ratio_mean")
"""Metrics fixed by construction when the update is exactly on-policy (0, 0 and 1)."""


def probe_rows(num_rows: int, count: int) -> list[int]:
    """``count`` row indices spread evenly over ``num_rows`` (all rows if there are fewer)."""
    if count >= num_rows:
        return list(range(num_rows))
    return sorted({round(i * (num_rows - 1) / max(count - 1, 1)) for i in range(count)})


def update_kl(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> float:
    """k3 estimate of KL(before || after) per policy token, from ``[B, T]`` logprobs of tokens sampled
    from ``before``: the masked mean of ``exp(d) - 1 - d`` with ``d = after - before`` (>= 0).
    Positions outside ``mask`` are never read (they may hold NaN: padding no forward computed)."""
    policy_token = mask.bool()
    if not policy_token.any():
        return 0.0
    d = (after[policy_token] - before[policy_token]).double()
    return float((torch.expm1(d) - d).mean())


def _own_part(parameter: torch.Tensor, rank: int) -> torch.Tensor | None:
    """The part of a parameter this rank adds to the sums, so that over all ranks each element counts
    once: a DTensor's shard (FSDP2), a ZeRO-3 partition; a parameter every rank holds whole (one FSDP2
    leaves unsharded, like a tied embedding; ZeRO-1/2; Ulysses) only on rank 0."""
    if hasattr(parameter, "ds_tensor"):
        return parameter.ds_tensor
    placements = getattr(parameter, "placements", None)
    if placements is not None and any(placement.is_shard() for placement in placements):
        return parameter.to_local()
    if placements is not None:  # a replicated DTensor
        return parameter.to_local() if rank == 0 else None
    return parameter if rank == 0 else None


class UpdateProbe:
    """Taken before a step's optimizer steps (``start``), read after them (``finish``).

    Args:
        policy: the ``PolicyWorker``.
        batch: the step's ``TrainBatch`` (``[B, T]`` tensors).
        old_logprobs: ``[B, T]`` logprobs the learner computed before the update, or None (exactly
            on-policy: the update's own forward records them in ``policy.update_logprobs``).
        kl_rows: rows to measure the KL on (0: no KL).
        rel_norm: measure ``update_rel_norm``.
    """

    def __init__(
        self,
        policy: Any,
        batch: TrainBatch,
        old_logprobs: torch.Tensor | None,
        *,
        kl_rows: int,
        rel_norm: bool,
    ) -> None:
        self.policy = policy
        self.rows = probe_rows(batch.num_rows, kl_rows) if kl_rows > 0 else []
        self.batch = batch.select(self.rows) if self.rows else None
        self.before_logprobs: torch.Tensor | None = None
        if self.batch is not None:
            if old_logprobs is not None:
                self.before_logprobs = old_logprobs[self.rows, : self.batch.completion_width]
            elif policy.strategy.world_size > 1:  # each rank records only its own rows' logprobs
                self.before_logprobs = policy.compute_logprobs(self.batch)
        rank = policy.strategy.rank
        trained = [p for p in policy.model.parameters() if p.requires_grad] if rel_norm else []
        self.measured = rel_norm
        self.trained = [part for p in trained if (part := _own_part(p, rank)) is not None]
        self.snapshot = [part.detach().clone() for part in self.trained]

    def finish(self) -> dict[str, float]:
        """``policy/update_kl`` and ``policy/update_rel_norm`` (those measured). A collective under a
        data-parallel strategy: every rank calls it."""
        metrics: dict[str, float] = {}
        if self.batch is not None:
            before = self.before_logprobs
            if before is None:  # on-policy, one process: the update's forward saw the weights before
                before = self.policy.update_logprobs[self.rows, : self.batch.completion_width]
            after = self.policy.compute_logprobs(self.batch)
            metrics["policy/update_kl"] = update_kl(before, after, self.batch.loss_mask)
        if self.measured:  # every rank reduces, also one with no part of its own
            sums = {"delta": 0.0, "theta": 0.0}
            with torch.no_grad():
                for part, old in zip(self.trained, self.snapshot, strict=True):
                    sums["delta"] += float((part.float() - old.float()).square().sum())
                    sums["theta"] += float(old.float().square().sum())
            sums = self.policy.strategy.reduce_metrics(sums)
            metrics["policy/update_rel_norm"] = (
                math.sqrt(sums["delta"] / sums["theta"]) if sums["theta"] else 0.0
            )
        self.snapshot = []
        return metrics
