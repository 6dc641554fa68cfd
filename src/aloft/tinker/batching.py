"""The datums of a ``forward_backward`` call as micro-batches, and their logprobs in one forward each.

Every Tinker loss is a sum of per-datum terms, so micro-batches of consecutive datums give the call's
loss and gradient exactly; ``MICRO_BATCH_TOKENS`` bounds what one forward holds. Datums of an RL batch
come in groups that share their prompt (a group's samples, and often a few-shot prefix common to all
of them): a micro-batch whose rows share a prefix of ``MIN_SHARED_PREFIX`` tokens or more runs that
prefix through the model once and the rows' own tails on its keys and values, as aloft's trainer does
with ``optim.share_prompts``. Same logprobs up to float rounding, same gradients (the rows' gradients
sum back into the shared prefix), and a fraction of the FLOPs when prompts are long next to replies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from aloft.algorithms import logprobs_from_logits
from aloft.models.compat import cache_kwarg
from aloft.tinker.errors import TinkerUserError
from aloft.tinker.wire import Datum

MICRO_BATCH_TOKENS = 2048
"""Tokens one forward may hold: the shared prefix once plus rows x the longest tail (or rows x the
longest datum without one). 2,048 tokens of a 49k-word vocabulary are 400 MB of fp32 logits, where a
whole batch of 64 x 200 would be 2.5 GB."""

MIN_SHARED_PREFIX = 16
"""Shortest common prefix worth its own forward (below it, one padded forward is as cheap)."""


@dataclass(kw_only=True)
class MicroBatch:
    """Consecutive datums, padded: tokens ``[B, N]``, loss inputs ``{name: [B, N]}`` (0 in padding), the
    mask of real positions ``[B, N]`` and the number of leading tokens every row shares (``prefix``,
    0 when they are run whole)."""

    tokens: torch.Tensor
    inputs: dict[str, torch.Tensor]
    mask: torch.Tensor
    prefix: int


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _cost(rows: int, longest: int, prefix: int) -> int:
    """Tokens a forward of ``rows`` datums holds: shared prefix once and the tails, or all padded."""
    if prefix >= MIN_SHARED_PREFIX:
        return prefix + rows * (longest - prefix)
    return rows * longest


def plan(data: list[Datum]) -> list[tuple[list[Datum], int]]:
    """Consecutive runs of datums with the prefix all rows of each share (capped so that every row
    keeps one token of its own); each within ``MICRO_BATCH_TOKENS`` unless it is a single datum.

    A datum joins the run before it when that fits the budget and, if the run shares a prefix, costs
    no more tokens than starting a run of its own: the next group's first sample shares only the
    few-shot part of the prompt, and taking it in would make every row run the rest of its prompt."""
    runs: list[tuple[list[Datum], int]] = []
    for datum in data:
        if runs:
            rows, prefix = runs[-1]
            longest = max(len(row.tokens) for row in rows)
            grown_prefix = min(_common_prefix(rows[0].tokens[:prefix], datum.tokens), len(datum.tokens) - 1)
            grown_longest = max(longest, len(datum.tokens))
            joined = _cost(len(rows) + 1, grown_longest, grown_prefix)
            apart = _cost(len(rows), longest, prefix) + len(datum.tokens)
            shares = prefix >= MIN_SHARED_PREFIX
            if joined <= MICRO_BATCH_TOKENS and (not shares or joined <= apart):
                runs[-1] = ([*rows, datum], grown_prefix)
                continue
        runs.append(([datum], len(datum.tokens) - 1))
    return [(rows, prefix if len(rows) > 1 and prefix >= MIN_SHARED_PREFIX else 0) for rows, prefix in runs]


def pad(data: list[Datum], prefix: int, vocab_size: int) -> MicroBatch:
    """Datums padded to one length, refusing (by datum and key) what does not fit the model."""
    longest = max(len(datum.tokens) for datum in data)
    tokens = torch.zeros(len(data), longest, dtype=torch.long)
    mask = torch.zeros(len(data), longest, dtype=torch.bool)
    names = set().union(*(datum.inputs for datum in data)) | {"target_tokens"}
    inputs = {name: torch.zeros(len(data), longest) for name in names}
    inputs["target_tokens"] = torch.zeros(len(data), longest, dtype=torch.long)
    for row, datum in enumerate(data):
        n = len(datum.tokens)
        if n == 0:
            raise TinkerUserError(f"datum {row} has no model_input tokens")
        tokens[row, :n] = torch.tensor(datum.tokens)
        mask[row, :n] = True
        if "target_tokens" not in datum.inputs:
            raise TinkerUserError(f"datum {row} has no loss_fn_inputs['target_tokens']")
        for name, value in datum.inputs.items():
            if value.ndim != 1 or value.shape[0] != n:
                raise TinkerUserError(
                    f"datum {row}: loss_fn_inputs[{name!r}] has shape {list(value.shape)}, "
                    f"not [{n}] like its model_input"
                )
            inputs[name][row, :n] = torch.from_numpy(np.ascontiguousarray(value)).to(inputs[name].dtype)
    targets = inputs["target_tokens"]
    if bool(((tokens >= vocab_size) | (tokens < 0) | (targets >= vocab_size) | (targets < 0)).any()):
        raise TinkerUserError(f"token ids must be in [0, {vocab_size})")
    return MicroBatch(tokens=tokens, inputs=inputs, mask=mask, prefix=prefix)


def micro_batches(data: list[Datum], vocab_size: int) -> list[MicroBatch]:
    """Every micro-batch of a call, all checked before any of them runs."""
    return [pad(rows, prefix, vocab_size) for rows, prefix in plan(data)]


def target_logprobs(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
    """``[B, N]`` logprobs of each row's ``target_tokens`` (differentiable; padding positions hold
    values the mask leaves out)."""
    targets = batch.inputs["target_tokens"]
    p = batch.prefix
    if p == 0:
        logits = model(input_ids=batch.tokens, attention_mask=batch.mask.long()).logits
        return logprobs_from_logits(logits, targets)
    rows = batch.tokens.shape[0]
    cache = DynamicCache()
    prefix_logits = model(
        input_ids=batch.tokens[:1, :p], use_cache=True, **{cache_kwarg(model): cache}
    ).logits[0]
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, *layer.keys.shape[1:]).contiguous()
        layer.values = layer.values.expand(rows, *layer.values.shape[1:]).contiguous()
    tails = model(
        input_ids=batch.tokens[:, p:],
        attention_mask=batch.mask.long(),
        position_ids=torch.arange(p, batch.tokens.shape[1]).expand(rows, -1),
        use_cache=True,
        **{cache_kwarg(model): cache},
    ).logits
    # The prefix's positions: one log-softmax, each row's own targets picked from it ([p, B] -> [B, p]).
    prefix_float = prefix_logits.float()
    picked = prefix_float.gather(-1, targets[:, :p].T.contiguous())
    prefix_logprobs = (picked - torch.logsumexp(prefix_float, dim=-1, keepdim=True)).T
    return torch.cat([prefix_logprobs, logprobs_from_logits(tails, targets[:, p:])], dim=1)
