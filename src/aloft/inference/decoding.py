"""One batch of token-in/token-out generation with a KV cache: left-padded prefill, then one token per step.

``generate_batch`` is synchronous (the engine runs it in a worker thread). Identical prompts (the n
samples of a GRPO group) are prefilled once and share the result. Rows finish independently (EOS / stop
token, stop string, ``max_tokens``, context limit); a finished row is dropped from the batch and from the
KV cache at once, so the remaining rows decode as a smaller batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from aloft.inference.sampling import sample_next_tokens
from aloft.models.compat import cache_kwarg
from aloft.types import Completion, GenerationRequest


@dataclass
class _Row:
    """Decoding state of one request."""

    request: GenerationRequest
    stop_ids: frozenset[int]
    stop_window: int
    """How many trailing tokens to decode when looking for a stop string (0: no stop strings)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(frozen=True)
class DecodeLimits:
    """Engine-wide decoding settings shared by every row of a batch."""

    eos_ids: frozenset[int]
    """Tokens that end a completion for every request (tokenizer / generation_config EOS, ``<|im_end|>``)."""
    pad_id: int
    max_positions: int
    """The model's context length: prompt + completion never exceeds it."""


def end_of_completion_ids(
    tokenizer: PreTrainedTokenizerBase, generation_config: Any | None
) -> frozenset[int]:
    """Every token that ends a completion: tokenizer EOS, ``generation_config`` EOS, and ``<|im_end|>``."""
    ids = set(_as_id_list(tokenizer.eos_token_id))
    if generation_config is not None:
        ids |= set(_as_id_list(generation_config.eos_token_id))
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        ids.add(int(im_end))
    return frozenset(ids)


def _as_id_list(ids: int | Iterable[int] | None) -> list[int]:
    if ids is None:
        return []
    return [ids] if isinstance(ids, int) else [int(i) for i in ids]


def _stop_window(stop: list[str]) -> int:
    # A token decodes to at least one byte, so a stop string of n bytes spans at most n tokens;
    # 3 more cover a multi-byte character split across the window's first token.
    return max((len(s.encode("utf-8")) for s in stop), default=-3) + 3


def _finish_reason(row: _Row, token: int, tokenizer: PreTrainedTokenizerBase, room: int) -> str | None:
    """Why ``row`` ends after appending ``token`` (``None``: it continues). ``room``: tokens left in context."""
    if token in row.stop_ids:
        return "stop"
    if row.stop_window > 0:
        tail = tokenizer.decode(row.token_ids[-row.stop_window :], skip_special_tokens=True)
        if any(stop in tail for stop in row.request.sampling.stop):
            return "stop"
    if len(row.token_ids) >= row.request.sampling.max_tokens or room <= 0:
        return "length"
    return None


def _left_pad(prompts: list[tuple[int, ...]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [U, T], attention_mask [U, T])`` with each prompt right-aligned (left padding)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, width - len(prompt) :] = 1
    return input_ids, attention_mask


@torch.inference_mode()
def generate_batch(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: list[GenerationRequest],
    seeds: list[int],
    limits: DecodeLimits,
    *,
    version: int = 0,
) -> list[Completion]:
    """Generate a completion for every request (same order), sampling row i with ``seeds[i]``.

    Shapes: the U distinct prompts are left-padded to ``[U, T]`` and prefilled once; the cache is then
    expanded to the B rows. ``position_ids`` count real tokens only, so a padded row sees the same
    positions as it would alone.
    """
    device = model.device
    rows = [
        _Row(
            request=request,
            stop_ids=limits.eos_ids | frozenset(request.sampling.stop_token_ids),
            stop_window=_stop_window(request.sampling.stop) if request.sampling.stop else 0,
        )
        for request in requests
    ]
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    temperature = torch.tensor([r.request.sampling.temperature for r in rows], dtype=torch.float32)
    top_k = torch.tensor([r.request.sampling.top_k for r in rows], dtype=torch.long)
    top_p = torch.tensor([r.request.sampling.top_p for r in rows], dtype=torch.float32)

    prompt_lengths = [len(r.request.prompt_ids) for r in rows]
    cache = DynamicCache()
    forward_kwargs = {cache_kwarg(model): cache, "use_cache": True, "logits_to_keep": 1}
    # Prefill each distinct prompt once (the n samples of a group share it), then give every row
    # its prompt's cache, mask, positions and next-token logits.
    distinct: dict[tuple[int, ...], int] = {}
    source = [distinct.setdefault(tuple(r.request.prompt_ids), len(distinct)) for r in rows]
    input_ids, attention_mask = _left_pad(list(distinct), limits.pad_id)  # [U, T]
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp_(min=0)  # [U, T]: padding does not count
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        **forward_kwargs,
    ).logits[:, -1, :]  # [U, V]
    next_positions = position_ids[:, -1] + 1  # [U]
    if len(distinct) < len(rows):
        row_source = torch.tensor(source, dtype=torch.long)
        cache.batch_select_indices(row_source.to(device))
        logits, attention_mask, next_positions = (
            logits[row_source.to(device)],
            attention_mask[row_source],
            next_positions[row_source],
        )
    logits = logits.cpu()  # [B, V]; sampling runs on CPU with per-row CPU generators

    active = list(range(len(rows)))  # batch position -> row index
    active_index = torch.arange(len(rows))
    while True:
        tokens, logprobs = sample_next_tokens(
            logits,
            temperature[active_index],
            top_k[active_index],
            top_p[active_index],
            [generators[i] for i in active],
        )
        token_list, logprob_list = tokens.tolist(), logprobs.tolist()
        continuing = []
        for position, row_index in enumerate(active):
            row = rows[row_index]
            row.token_ids.append(token_list[position])
            row.logprobs.append(logprob_list[position])
            room = limits.max_positions - prompt_lengths[row_index] - len(row.token_ids)
            row.finish_reason = _finish_reason(row, token_list[position], tokenizer, room)
            if row.finish_reason is None:
                continuing.append(position)
        if not continuing:
            break
        if len(continuing) < len(active):
            # Drop finished rows from every batch-shaped tensor, the KV cache included.
            keep = torch.tensor(continuing, dtype=torch.long)
            cache.batch_select_indices(keep.to(device))
            attention_mask = attention_mask[keep]
            next_positions = next_positions[keep]
            tokens = tokens[keep]
            active = [active[p] for p in continuing]
            active_index = torch.tensor(active, dtype=torch.long)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=1)
        logits = (
            model(
                input_ids=tokens[:, None].to(device),
                attention_mask=attention_mask.to(device),
                position_ids=next_positions[:, None].to(device),
                **forward_kwargs,
            )
            .logits[:, -1, :]
            .cpu()
        )
        next_positions += 1

    return [
        Completion(
            token_ids=row.token_ids,
            logprobs=row.logprobs,
            finish_reason=row.finish_reason or "length",
            text=tokenizer.decode(row.token_ids, skip_special_tokens=True),
            policy_version=version,
        )
        for row in rows
    ]
