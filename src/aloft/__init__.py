"""aloft: modular, fast reinforcement learning for language models on tool-use tasks.

The public API, importable from the top level (each name loads its layer on first use, so
``import aloft`` stays cheap)::

    import aloft

    config = aloft.load_config("quickstart", ["trainer.max_steps=20"])
    aloft.train(config)

Extension points, one decorator each: ``register_env`` (a ``Env`` subclass), ``register_policy_loss``
and ``register_advantage_estimator`` (functions; ``params=`` declares their own settings),
``register_plan`` (an ``ExecutionPlan``), ``register_engine`` (an ``InferenceEngine``). The
contracts behind them are in docs/reference/design.md.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC: dict[str, str] = {
    # runs
    "AloftConfig": "aloft.config",
    "load_config": "aloft.config",
    "Trainer": "aloft.trainer",
    "train": "aloft.trainer",
    # environments and tools
    "Env": "aloft.gym",
    "StepOutput": "aloft.gym",
    "InfrastructureError": "aloft.gym",
    "register_env": "aloft.gym",
    "make_env": "aloft.gym",
    "check_env": "aloft.gym",
    "Tool": "aloft.gym.tools",
    "ToolGroup": "aloft.gym.tools",
    "tool": "aloft.gym.tools",
    # algorithms
    "register_advantage_estimator": "aloft.algorithms",
    "register_policy_loss": "aloft.algorithms",
    "aggregate_loss": "aloft.algorithms",
    # execution plans and engines
    "ExecutionPlan": "aloft.trainer.plans",
    "register_plan": "aloft.trainer.plans",
    "InferenceEngine": "aloft.inference",
    "register_engine": "aloft.inference",
}
"""Public name -> the module that defines it."""

_RENAMED = {"make_env": "make"}
"""Top-level names spelled differently in their module (``aloft.gym.make``)."""

__all__ = ["__version__", *sorted(_PUBLIC)]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'aloft' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
