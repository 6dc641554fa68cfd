"""Built-in environments. Each is registered by id on ``import aloft.gym`` with a lazy
``"module:Class"`` entry point, so importing the gym never imports an env's dependencies."""

from __future__ import annotations

BUILTIN_ENVS: dict[str, str] = {
    "arithmetic": "aloft.gym.envs.arithmetic:ArithmeticEnv",
}
"""env id -> entry point."""
