"""Built-in environments. Each is registered by id on ``import aloft.gym`` with a lazy
``"module:Class"`` entry point, so importing the gym never imports an env's dependencies."""

from __future__ import annotations

BUILTIN_ENVS: dict[str, str] = {
    "arithmetic": "aloft.gym.envs.arithmetic:ArithmeticEnv",
    "code": "aloft.gym.envs.code:CodeEnv",
    "code_feedback": "aloft.gym.envs.code:CodeFeedbackEnv",
    "math": "aloft.gym.envs.math:MathEnv",
    "math_tool": "aloft.gym.envs.math:MathToolEnv",
    "search": "aloft.gym.envs.search:SearchEnv",
    "text2sql": "aloft.gym.envs.text2sql:Text2SqlEnv",
}
"""env id -> entry point."""
