"""Model loading (local dirs, built-in names, hub ids) and tiny random models for tests."""

from aloft.models.loading import (
    BUILTIN_MODELS,
    ModelUnavailableError,
    cache_dir,
    load_model,
    load_tokenizer,
    resolve_model_path,
)
from aloft.models.precision import cpu_has_native_bf16, fast_dtype
from aloft.models.tiny import build_tiny_model, build_tiny_tokenizer

__all__ = [
    "BUILTIN_MODELS",
    "ModelUnavailableError",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "cache_dir",
    "cpu_has_native_bf16",
    "fast_dtype",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]
