"""Math word problems graded with math-verify: ``math`` (single turn) and ``math_tool``
(tool-integrated reasoning with a calculator).

The model ends its reply with the answer in ``\\boxed{...}`` (nested braces are fine) or, GSM8K
style, on a line ``#### answer``. The extracted answer is compared with the ground truth by
``math_verify`` (``parse`` + ``verify``: ``0.5`` == ``\\frac{1}{2}``, ``x=5`` == ``5``, ``1,000`` ==
``1000``, ...), run in worker processes with a hard time limit (see ``math_grading``), so a
pathological answer can neither hang ``step`` nor break when ``step`` runs in a worker thread.

Reward, given on the final turn (earlier turns get 0)::

    reward = format_reward * format_ok + correct_reward * correct      # 0, 0.1 or 1.0 by default

``format_ok``: an answer was extracted; ``correct``: math-verify says it equals the ground truth.

``math``: one turn by default. With ``max_turns > 1`` and ``feedback`` a wrong or missing answer
gets a user message asking for another try.

``math_tool``: the model may write ``<calculator>expression</calculator>`` (one or more per turn;
an unclosed last tag counts, for generations stopped on ``</calculator>``); each is evaluated by
``CalculatorTools`` and the results come back as one user message of ``<result>...</result>``
blocks. A reply with a final answer ends the episode (if the answer is wrong, ``feedback`` asks
for another try while turns remain); a reply with neither a calculator call nor an answer ends it
unless ``feedback`` is on. ``reset`` adds the tool's instructions to the system message
(``tool_instructions``).

Config (all optional): ``answer_format`` ``"auto"`` (default: the last ``\\boxed{}``, else the last
``####``), ``"boxed"`` or ``"hash"``; ``format_reward`` (0.1); ``correct_reward`` (0.9);
``max_turns`` (1 for ``math``, 4 for ``math_tool``); ``feedback`` (False); ``verify_timeout_s`` (5);
``math_tool`` only: ``max_tool_calls_per_turn`` (4), ``tool_instructions`` (True).

Row extras: the ground truth in ``answer`` or ``reward_spec["ground_truth"]`` (required; a LaTeX or
plain string or a number; a ground truth holding a ``\\boxed{}`` or a ``#### x`` line is reduced to
that answer); anything else (``question``, ``extra_info``) is informational.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

from aloft.gym.core import Env, StepOutput
from aloft.gym.envs.math_grading import default_grader, extract_boxed, extract_hash_answer
from aloft.gym.tools.calculator import CalculatorTools
from aloft.tool_calls import parse_tag_calls
from aloft.types import Message

__all__ = ["MathEnv", "MathToolEnv", "extract_math_answer"]

ANSWER_FORMATS = ("auto", "boxed", "hash")
DEFAULT_CONFIG: dict[str, Any] = {
    "answer_format": "auto",
    "format_reward": 0.1,
    "correct_reward": 0.9,
    "max_turns": 1,
    "feedback": False,
    "verify_timeout_s": 5.0,
}
TOOL_DEFAULT_CONFIG: dict[str, Any] = {
    **DEFAULT_CONFIG,
    "max_turns": 4,
    "max_tool_calls_per_turn": 4,
    "tool_instructions": True,
}

WRONG_ANSWER_MESSAGE = "That is not correct. Try again, and put your final answer in \\boxed{}."
MISSING_ANSWER_MESSAGE = "Put your final answer in \\boxed{}."
TOOL_TAG = "calculator"
TOOL_INSTRUCTIONS = (
    "You can use a calculator: write <calculator>expression</calculator> (for example "
    "<calculator>(3 + 4) * 12 / 5</calculator>) and stop; the result comes back as "
    "<result>...</result>. It supports + - * / // % ** ( ), pi, e, sqrt, log, exp, sin, cos, tan, "
    "abs, round, floor, ceil and factorial. When you know the final answer, write it in \\boxed{}."
)
MISSING_ANSWER_OR_TOOL_MESSAGE = (
    "Use <calculator>expression</calculator> to compute, or give your final answer in \\boxed{}."
)


def extract_math_answer(completion: str, answer_format: str = "auto") -> str | None:
    """The answer in ``completion``: the last ``\\boxed{}`` and/or the last ``#### x`` line."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {list(ANSWER_FORMATS)}, got {answer_format!r}")
    if answer_format in ("auto", "boxed"):
        boxed = extract_boxed(completion)
        if boxed or answer_format == "boxed":
            return boxed or None
    return extract_hash_answer(completion)


class MathEnv(Env):
    """The ``math`` env; see the module docstring."""

    defaults: dict[str, Any] = DEFAULT_CONFIG
    env_name = "math"

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        unknown = sorted(set(self.config) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"{self.env_name} env: unknown config keys {unknown}; accepted keys: {sorted(self.defaults)}"
            )
        self.settings: dict[str, Any] = {**self.defaults, **self.config}
        self._check_settings()
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError(f"{self.env_name} env: grading needs math-verify; pip install math-verify")
        self.ground_truth: str = self._read_ground_truth()
        self._start_episode()

    # ---- setup ----------------------------------------------------------------------------------
    def _check_settings(self) -> None:
        settings = self.settings
        if settings["answer_format"] not in ANSWER_FORMATS:
            raise ValueError(
                f"{self.env_name} env: answer_format must be one of {list(ANSWER_FORMATS)}, "
                f"got {settings['answer_format']!r}"
            )
        for name in ("format_reward", "correct_reward"):
            value = settings[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{self.env_name} env: {name} must be a finite number, got {value!r}")
        for name in ("max_turns", "max_tool_calls_per_turn"):
            value = settings.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.env_name} env: {name} must be an integer >= 1, got {value!r}")
        timeout = settings["verify_timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"{self.env_name} env: verify_timeout_s must be > 0, got {timeout!r}")

    def _read_ground_truth(self) -> str:
        ground_truth = self.extras.get("answer")
        if ground_truth is None:
            reward_spec = self.extras.get("reward_spec") or {}
            ground_truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        if ground_truth is None or not str(ground_truth).strip():
            raise ValueError(
                f"{self.env_name} env: the row has no ground truth; put it in the row's 'answer' column "
                "or in reward_spec.ground_truth"
            )
        text = str(ground_truth).strip()
        return extract_boxed(text) or extract_hash_answer(text) or text

    def _start_episode(self) -> None:
        self._turns = 0
        self._format_ok = False
        self._correct = False
        self._verify_timeouts = 0
        self._done = False

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        self._start_episode()
        return super().reset(prompt)

    # ---- stepping -------------------------------------------------------------------------------
    def step(self, action: str) -> StepOutput:
        if self._done:
            raise RuntimeError(
                f"{self.env_name} env: step() called after the episode ended; call reset() first"
            )
        self._turns += 1
        answer = extract_math_answer(action, self.settings["answer_format"])
        if answer is None:
            return self._no_answer(action)
        return self._judge(answer)

    def _judge(self, answer: str) -> StepOutput:
        grade = default_grader().verify(
            answer, self.ground_truth, timeout_s=self.settings["verify_timeout_s"]
        )
        self._format_ok, self._correct = True, grade.correct
        self._verify_timeouts += int(grade.timed_out)
        info = self._info(answer) | {"verify_timed_out": grade.timed_out}
        if grade.correct or not self._can_retry():
            return self._finish(info)
        return self._continue(WRONG_ANSWER_MESSAGE, info)

    def _no_answer(self, action: str) -> StepOutput:
        self._format_ok = self._correct = False
        if self._can_retry():
            return self._continue(MISSING_ANSWER_MESSAGE, self._info(None))
        return self._finish(self._info(None))

    def _can_retry(self) -> bool:
        return bool(self.settings["feedback"]) and self._turns < self.settings["max_turns"]

    def _info(self, answer: str | None) -> dict[str, Any]:
        return {
            "turn": self._turns,
            "format_ok": self._format_ok,
            "correct": self._correct,
            "extracted_answer": answer,
            "ground_truth": self.ground_truth,
        }

    def _finish(self, info: dict[str, Any]) -> StepOutput:
        self._done = True
        reward = (
            self.settings["format_reward"] * self._format_ok + self.settings["correct_reward"] * self._correct
        )
        return StepOutput(observations=[], reward=float(reward), done=True, info=info)

    def _continue(self, message: str, info: dict[str, Any]) -> StepOutput:
        return StepOutput(
            observations=[{"role": "user", "content": message}], reward=0.0, done=False, info=info
        )

    def metrics(self) -> dict[str, float]:
        """``format_ok`` and ``correct`` (0/1) of the last turn, ``turns`` and ``verify_timeouts``."""
        return {
            "format_ok": float(self._format_ok),
            "correct": float(self._correct),
            "turns": float(self._turns),
            "verify_timeouts": float(self._verify_timeouts),
        }


class MathToolEnv(MathEnv):
    """The ``math_tool`` env: ``MathEnv`` plus ``<calculator>`` calls; see the module docstring."""

    defaults = TOOL_DEFAULT_CONFIG
    env_name = "math_tool"

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        self.tools = CalculatorTools()

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        messages, info = super().reset(prompt)
        self.tools.reset_stats()
        if self.settings["tool_instructions"]:
            messages = _with_system_instructions(messages, TOOL_INSTRUCTIONS)
        return messages, info

    def _no_answer(self, action: str) -> StepOutput:
        calls = parse_tag_calls(action, [TOOL_TAG], allow_unclosed=True)
        self._format_ok = self._correct = False
        if not calls:
            if self._can_retry():
                return self._continue(MISSING_ANSWER_OR_TOOL_MESSAGE, self._info(None))
            return self._finish(self._info(None))
        if self._turns >= self.settings["max_turns"]:
            return self._finish(self._info(None) | {"tool_calls": 0, "turn_limit": True})
        limit = self.settings["max_tool_calls_per_turn"]
        blocks = []
        for call in calls[:limit]:
            result = self.tools.call("calculate", {"expression": call.arguments["input"]})
            blocks.append(f"<result>\n{result.output}\n</result>")
        if len(calls) > limit:
            blocks.append(
                f"<result>\nError: at most {limit} calculator calls per turn; the rest were skipped.\n</result>"
            )
        info = self._info(None) | {"tool_calls": min(len(calls), limit)}
        return self._continue("\n".join(blocks), info)

    def metrics(self) -> dict[str, float]:
        """``MathEnv``'s metrics plus the calculator's ``tool_calls``, ``tool_errors``, ... of the episode."""
        tool_metrics = self.tools.metrics()
        tool_metrics.pop("tool_seconds", None)  # wall time is not deterministic; keep metrics reproducible
        return super().metrics() | tool_metrics

    def close(self) -> None:
        self.tools.close()
        super().close()


def _with_system_instructions(messages: list[Message], instructions: str) -> list[Message]:
    """``messages`` with ``instructions`` appended to the system message (or a new one first)."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content', '')}\n\n{instructions}".strip()
        return [first, *messages[1:]]  # type: ignore[list-item]
    return [{"role": "system", "content": instructions}, *messages]
