"""Small shims over transformers versions, shared by the engine and the trainer."""

from __future__ import annotations

import inspect

from torch import nn


def cache_kwarg(model: nn.Module) -> str:
    """Name of the forward argument that takes the KV cache (``cache`` in newer transformers)."""
    base = (
        model.get_base_model() if hasattr(model, "get_base_model") else model
    )  # peft wraps forward(**kwargs)
    parameters = inspect.signature(base.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"
