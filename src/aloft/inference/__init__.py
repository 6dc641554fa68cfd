"""Inference engines behind one protocol (docs/reference/design.md §3).

Importing this package stays torch-free: it exposes the ``InferenceEngine`` protocol and the registry.
Concrete engines live in their own modules (``aloft.inference.hf.HFEngine``) or come from
``make_engine("hf", ...)``.
"""

from aloft.inference.base import (
    InferenceEngine,
    WeightsSource,
    make_engine,
    register_engine,
    registered_engines,
    supports_lora_sync,
)
from aloft.types import LoraAdapters

__all__ = [
    "InferenceEngine",
    "LoraAdapters",
    "WeightsSource",
    "make_engine",
    "register_engine",
    "registered_engines",
    "supports_lora_sync",
]
