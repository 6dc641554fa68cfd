"""Per-row next-token sampling with sampler logprobs, vectorised over a decoding batch.

Each row of a batch has its own temperature, top-k, top-p and ``torch.Generator``, so a request's
tokens depend only on its own seed and logits, never on what else is in the batch: a row consumes
exactly one uniform draw from its own generator per sampled token (inverse-CDF sampling).

The reported logprob of a token is ``log_softmax(logits.float() / T)[token]`` with T the row's
temperature (T = 1 for greedy rows), taken BEFORE top-k / top-p truncation. That is the distribution
the trainer recomputes from the same weights, so sampler and trainer logprobs agree up to numerics.
"""

from __future__ import annotations

import torch


def sample_next_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    generators: list[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return ``(tokens [B] long, logprobs [B] float32)``.

    Args:
        logits: ``[B, V]`` next-token logits (any float dtype; computed in float32).
        temperature: ``[B]``; 0 means greedy (argmax of the logits).
        top_k: ``[B]`` long; 0 or negative disables top-k for that row.
        top_p: ``[B]``; 1 disables nucleus truncation for that row.
        generators: ``B`` generators; only rows with temperature > 0 draw from theirs.
    """
    logits = logits.float()
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature).float()
    logprobs = torch.log_softmax(logits / scale[:, None], dim=-1)  # [B, V]
    tokens = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)  # [B]
    greedy_rows = greedy.nonzero().squeeze(1)
    if greedy_rows.numel() > 0:  # argmax over the vocabulary costs as much as the softmax: only where needed
        tokens[greedy_rows] = logits.index_select(0, greedy_rows).argmax(dim=-1)
    sampled_rows = (~greedy).nonzero().squeeze(1)
    if sampled_rows.numel() > 0:
        every_row = sampled_rows.numel() == logits.shape[0]
        probs = (logprobs if every_row else logprobs.index_select(0, sampled_rows)).exp()  # [S, V]
        probs = apply_top_k(probs, top_k.index_select(0, sampled_rows))
        probs = apply_top_p(probs, top_p.index_select(0, sampled_rows))
        uniforms = torch.stack([torch.rand((), generator=generators[row]) for row in sampled_rows.tolist()])
        tokens[sampled_rows] = _inverse_cdf(probs, uniforms)
    chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
    return tokens, chosen


def _inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Sample ``[S]`` indices from unnormalised ``probs [S, V]`` given one uniform in [0, 1) per row.

    With ``right=True`` the pick is the first index whose CDF exceeds the target, which always has
    positive probability (zeroed tokens leave the CDF flat, so they are never the first to exceed it).
    """
    cdf = probs.cumsum(dim=-1)  # [S, V]
    total = cdf[:, -1]
    # u * total can round up to total itself; keep the target strictly below it.
    targets = torch.minimum(uniforms * total, torch.nextafter(total, torch.zeros_like(total)))
    picks = torch.searchsorted(cdf, targets[:, None], right=True).squeeze(1)
    return picks.clamp_(max=probs.shape[-1] - 1)


def apply_top_k(probs: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Zero every probability below each row's k-th largest (``top_k <= 0`` or ``>= V``: unchanged).

    Ties with the k-th value are kept. ``probs`` is ``[S, V]``, ``top_k`` is ``[S]``.
    """
    vocab = probs.shape[-1]
    active = (top_k > 0) & (top_k < vocab)
    if not bool(active.any()):
        return probs
    k_max = int(top_k[active].max())
    kth_largest = probs.topk(k_max, dim=-1).values  # [S, k_max], descending
    k_index = (top_k.clamp(min=1, max=k_max) - 1)[:, None]
    threshold = kth_largest.gather(1, k_index).squeeze(1)
    threshold = torch.where(active, threshold, torch.zeros_like(threshold))
    return probs.masked_fill(probs < threshold[:, None], 0.0)


def apply_top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep each row's smallest set of most likely tokens whose mass reaches ``top_p`` (1: unchanged).

    Works on unnormalised ``probs [S, V]`` (e.g. after top-k): mass is measured relative to the row
    sum. The most likely token is always kept.
    """
    rows = (top_p < 1).nonzero().squeeze(1)
    if rows.numel() == 0:
        return probs
    subset = probs.index_select(0, rows)
    sorted_probs, order = subset.sort(dim=-1, descending=True)
    row_mass = sorted_probs.sum(dim=-1, keepdim=True)
    mass_before = (sorted_probs.cumsum(dim=-1) - sorted_probs) / row_mass  # mass of strictly likelier tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p.index_select(0, rows)[:, None], 0.0)
    probs = probs.clone()
    probs[rows] = torch.zeros_like(subset).scatter_(-1, order, sorted_probs)
    return probs
