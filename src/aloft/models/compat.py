"""Small shims over transformers versions, shared by the engine and the trainer."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from torch import nn


def cache_kwarg(model: nn.Module) -> str:
    """Name of the forward argument that takes the KV cache (``cache`` in newer transformers)."""
    base = (
        model.get_base_model() if hasattr(model, "get_base_model") else model
    )  # peft wraps forward(**kwargs)
    parameters = inspect.signature(base.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def plain_causal_attention(config: Any) -> bool:
    """Whether a model config's attention is plain causal softmax attention over the whole sequence.

    What aloft's own attention layouts reproduce exactly: the engine's shared-prefix decode
    (``aloft.inference.shared_prefix``) and the trainer's packed rows (``aloft.training.packing``).
    Soft-capped logits (Gemma-2), attention sinks (gpt-oss) and sliding windows change attention
    weights in ways those layouts do not.
    """
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    windowed = getattr(text_config, "sliding_window", None) is not None and getattr(
        text_config, "use_sliding_window", True
    )
    layer_types = set(getattr(text_config, "layer_types", None) or ["full_attention"])
    return (
        not windowed
        and layer_types == {"full_attention"}
        and getattr(text_config, "attn_logit_softcapping", None) is None
        and "gpt_oss" not in str(getattr(text_config, "model_type", ""))
    )


@contextlib.contextmanager
def attention_implementation(model: nn.Module, implementation: str) -> Iterator[None]:
    """``model`` runs ``implementation`` (a transformers attention name) inside, its own one after."""
    previous = model.config._attn_implementation
    if previous == implementation:
        yield
        return
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
