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

EXAMPLE_REPLIES: dict[str, list[str]] = {
    "arithmetic": ["The answer is 7."],
    "math": ["3 + 4 = 7, so \\boxed{7}"],
    "math_tool": ["<calculator>3+4</calculator>", "So \\boxed{7}"],
    "search": ["<search>programming language</search>", "<answer>lisp</answer>"],
    "text2sql": [
        "<think>look first</think><sql>SELECT COUNT(*) FROM sqlite_master</sql>",
        "<think>now answer</think><solution>SELECT 1</solution>",
    ],
    "code": ["```python\nprint(1)\n```"],
    "code_feedback": ["```python\ndef f():\n    return 0\n```", "```python\ndef f():\n    return 1\n```"],
}
"""env id -> replies that exercise each built-in env's protocol: a tool call, then an answer.

A scripted policy (``make_engine("scripted", tokenizer=..., replies=EXAMPLE_REPLIES[env_id])``) sends
the k-th reply on its k-th turn, so an episode walks the env's whole protocol without a model: the
conformance test of every env, and the env throughput benchmark (``benchmarks/env_throughput.py``).
Single-turn envs get just the answer; the replies need not be right (``code_feedback``'s first
attempt fails on purpose, so its test output comes back as a retry prompt)."""
