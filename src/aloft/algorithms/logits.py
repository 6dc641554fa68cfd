"""Token logprobs and entropies from model logits, in float32 and without a ``[B, T, V]`` float32 copy.

Logits of a language model are ``[B, T, V]`` with ``V`` around 50k-150k, often in bf16. ``log_softmax``
over the whole tensor in float32 would materialise a second tensor of that size (and bf16 arithmetic is
too coarse for importance ratios near 1). So: logprob = gathered logit - logsumexp, and half-precision
logits are upcast one sequence at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_FULL_PRECISION = (torch.float32, torch.float64)


def _effective_temperature(temperature: float) -> float:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    # Engines report greedy (temperature 0) logprobs under temperature 1 (aloft.types.SamplingParams).
    return temperature if temperature > 0 else 1.0


def _per_sequence(
    logits: torch.Tensor, fn: Callable[[torch.Tensor, int], torch.Tensor], upcast: bool = True
) -> torch.Tensor:
    """Apply ``fn(float_logits [T, V] or [B, T, V], row)`` in float32 or better, a row at a time for
    half-precision logits (``upcast=False``: ``fn`` gets the half-precision row and upcasts itself).

    Rows come from one ``unbind``, not from ``logits[row]``: the backward of ``B`` separate selects
    would build ``B`` zero-filled ``[B, T, V]`` gradients and add them up (``O(B^2 T V)``, seconds
    for a 32-row batch over a 49k vocabulary); ``unbind``'s backward stacks the row gradients once.
    """
    if logits.dtype in _FULL_PRECISION:
        return fn(logits, -1)
    if logits.shape[0] == 0:
        return logits.new_zeros(logits.shape[:-1], dtype=torch.float32)
    rows = logits.unbind(0)
    return torch.stack(
        [fn(row_logits.float() if upcast else row_logits, row) for row, row_logits in enumerate(rows)]
    )


def logprobs_from_logits(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``log softmax(logits / temperature)[token_ids]`` ``[B, T]`` from logits ``[B, T, V]``, ids ``[B, T]``.

    Aligning logits with the next token is the caller's business (logits at position t predict token
    t + 1). Returns float32 for half-precision logits (float64 stays float64); differentiable in
    ``logits``. ``temperature=0`` (greedy) is read as 1, the convention sampler logprobs follow.
    """
    if logits.dim() != 3 or token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be [B, T, V] and token_ids [B, T], got {tuple(logits.shape)} and "
            f"{tuple(token_ids.shape)}"
        )
    temperature = _effective_temperature(temperature)

    def gather_logprobs(float_logits: torch.Tensor, row: int) -> torch.Tensor:
        ids = token_ids if row < 0 else token_ids[row]
        if temperature != 1.0:
            float_logits = float_logits / temperature
        picked = float_logits.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(float_logits, dim=-1)

    return _per_sequence(logits, gather_logprobs)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy ``[B, T]`` (nats) of ``softmax(logits / temperature)`` from logits ``[B, T, V]``.

    ``H = logsumexp(z) - sum(softmax(z) * z)``; float32 for half-precision logits; differentiable.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got {tuple(logits.shape)}")
    temperature = _effective_temperature(temperature)

    def entropy(float_logits: torch.Tensor, row: int) -> torch.Tensor:
        if temperature != 1.0:
            float_logits = float_logits / temperature
        return torch.logsumexp(float_logits, dim=-1) - (
            torch.softmax(float_logits, dim=-1) * float_logits
        ).sum(-1)

    return _per_sequence(logits, entropy)


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0, *, entropy_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, entropy)``, each ``[B, T]`` float32, as ``logprobs_from_logits`` and
    ``entropy_from_logits`` give them (up to float rounding), in one pass over the logits.

    The float32 upcast and the logsumexp are shared, and the softmax is ``exp(z - logsumexp)``. With
    ``entropy_grad=False`` the entropy is a constant (a metric): no ``[B, T, V]`` softmax is kept
    for the backward pass. ``logprobs`` is differentiable in ``logits`` either way.
    """
    if logits.dim() != 3 or token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be [B, T, V] and token_ids [B, T], got {tuple(logits.shape)} and "
            f"{tuple(token_ids.shape)}"
        )
    temperature = _effective_temperature(temperature)

    def both(float_logits: torch.Tensor, row: int) -> torch.Tensor:
        ids = token_ids if row < 0 else token_ids[row]
        if temperature != 1.0:
            float_logits = float_logits / temperature
        lse = torch.logsumexp(float_logits, dim=-1)
        logprobs = float_logits.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1) - lse
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
            z, z_lse = (float_logits, lse) if entropy_grad else (float_logits.detach(), lse.detach())
            entropy = z_lse - (torch.exp(z - z_lse.unsqueeze(-1)) * z).sum(-1)
        return torch.stack([logprobs, entropy])  # [2, (B,) T]

    if logits.shape[0] == 0 and logits.dtype not in _FULL_PRECISION:
        empty = logits.new_zeros(logits.shape[:-1], dtype=torch.float32)
        return empty, empty.clone()
    if not entropy_grad and logits.dtype != torch.float64:
        # The common case (entropy as a metric): fused, fewer passes over the [.., V] logits.
        stacked = _per_sequence(
            logits,
            lambda z, row: torch.stack(
                _LogprobsAndEntropy.apply(z, token_ids if row < 0 else token_ids[row], temperature)
            ),
            upcast=False,
        )
        out = stacked if logits.dtype in _FULL_PRECISION else stacked.transpose(0, 1)
        return out[0], out[1].detach()
    out = both(logits, -1) if logits.dtype in _FULL_PRECISION else _per_sequence(logits, both).transpose(0, 1)
    logprobs, entropy = out[0], out[1]  # out: [2, B, T]
    return logprobs, entropy if entropy_grad else entropy.detach()


class _LogprobsAndEntropy(torch.autograd.Function):
    """``(logprobs, entropy)`` in float32 of logits ``[..., V]`` (any float dtype) in a few passes
    over the vocabulary.

    Forward: the float32 upcast, then the softmax ``p`` built in place (max, one ``exp``, one
    division), the entropy ``lse - <p, z>`` as a batched dot product. Only the input (kept alive by
    the graph anyway) and ``lse`` are saved: the backward rebuilds ``p = exp(z - lse)`` in a scratch
    buffer and returns ``g * (onehot - p) / T``. Saving ``p`` instead would hold a float32 copy of
    every logit row until the backward; on a 49k vocabulary those are fresh pages that fault on
    first touch, slower than the recomputation. The entropy gets no gradient (it is a metric here).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, token_ids: torch.Tensor, temperature: float):  # type: ignore[override]
        z = _scaled_float(logits, temperature)
        top = z.amax(-1, keepdim=True)
        p = torch.sub(z, top).exp_()
        total = p.sum(-1, keepdim=True)
        p.div_(total)
        lse = top + total.log()  # [..., 1]
        ids = token_ids.long().unsqueeze(-1)
        logprobs = (z.gather(-1, ids) - lse).squeeze(-1)
        entropy = lse.squeeze(-1) - torch.matmul(p.unsqueeze(-2), z.unsqueeze(-1)).squeeze(-1).squeeze(-1)
        ctx.save_for_backward(logits, lse, ids)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor, _grad_entropy: torch.Tensor):  # type: ignore[override]
        logits, lse, ids = ctx.saved_tensors
        z = _scaled_float(logits, ctx.temperature)
        if z is logits:
            z = z.clone()  # float32 input: the scratch buffer must not be the input itself
        grad = z.sub_(lse).exp_().mul_((-grad_logprobs).unsqueeze(-1))  # -g * p
        grad.scatter_add_(-1, ids, grad_logprobs.unsqueeze(-1))
        if ctx.temperature != 1.0:
            grad /= ctx.temperature
        return grad.to(logits.dtype), None, None


def _scaled_float(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` in float32 or better (``logits`` itself when nothing changes)."""
    z = logits if logits.dtype in _FULL_PRECISION else logits.float()
    return z / temperature if temperature != 1.0 else z
