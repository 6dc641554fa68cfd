"""Tied weights (input embedding = LM head) in weight updates.

A trainer sends a tied tensor once, under one of its names (``PolicyWorker.named_weights``). Engines
that keep the two as separate parameters after a reload (vLLM's in-place reload re-creates the
embedding, so the LM head no longer shares it) must receive both names: ``with_tied_aliases`` adds
the missing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EMBEDDING, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"


def tied_aliases(model_path: str) -> dict[str, str]:
    """``{name: other name}`` for the tied weights of the HF model at ``model_path`` (empty if untied)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text_config, "tie_word_embeddings", getattr(config, "tie_word_embeddings", False)):
        return {EMBEDDING: LM_HEAD, LM_HEAD: EMBEDDING}
    return {}


def with_tied_aliases(
    weights: Iterable[tuple[str, Any]], aliases: Mapping[str, str]
) -> list[tuple[str, Any]]:
    """``weights`` plus, for each tied tensor given under one name only, the same tensor under the other."""
    items = list(weights)
    names = {name for name, _ in items}
    extra = [
        (aliases[name], tensor) for name, tensor in items if name in aliases and aliases[name] not in names
    ]
    return items + extra
