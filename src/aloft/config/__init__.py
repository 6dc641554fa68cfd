"""Typed run configuration: sections, presets, overrides, validation (imports nothing of aloft's)."""

from aloft.config.loading import (
    ConfigError,
    apply_override,
    describe_fields,
    flatten,
    load_config,
    presets,
    save_config,
    validate_config,
)
from aloft.config.schema import (
    AlgorithmConfig,
    AloftConfig,
    CriticConfig,
    DataConfig,
    EngineConfig,
    EnvConfig,
    GeneratorConfig,
    ModelConfig,
    OptimConfig,
    TrainerConfig,
)

__all__ = [
    "AlgorithmConfig",
    "AloftConfig",
    "ConfigError",
    "CriticConfig",
    "DataConfig",
    "EngineConfig",
    "EnvConfig",
    "GeneratorConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainerConfig",
    "apply_override",
    "describe_fields",
    "flatten",
    "load_config",
    "presets",
    "save_config",
    "validate_config",
]
