"""When a completion ends: the tokens that end every completion, stop strings and the context limit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase


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


def stop_window(stop: list[str]) -> int:
    # A token decodes to at least one byte, so a stop string of n bytes spans at most n tokens;
    # 3 more cover a multi-byte character split across the window's first token.
    return max((len(s.encode("utf-8")) for s in stop), default=-3) + 3
