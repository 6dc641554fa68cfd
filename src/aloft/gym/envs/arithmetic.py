"""The quick-start env: grade a numeric answer, with an optional retry loop.

The prompt asks e.g. "Add 3 and 5. End your reply with: The answer is N." and the model should end
with "The answer is 8." Reward per episode::

    reward = format_reward * format_ok + correct_reward * correct        # 0, 0.5 or 1.0 by default

where ``format_ok`` means an answer in the required format was found (its last occurrence counts;
with ``strict_end``, the default, "The answer is N" must also *end* the reply, as the prompt asks:
only a period, emphasis and whitespace may follow) and ``correct`` means that answer equals the ground truth as a number ("8.0" == "8" == "8/1").

With ``max_turns > 1`` a wrong or unformatted reply gets a user message asking for another try;
the reward is given on the final turn only (earlier turns get 0), which is the turn that is
correct or the last one allowed.

Config (all optional): ``answer_format`` ``"the_answer_is"`` (default) or ``"boxed"``;
``format_reward`` (0.5); ``correct_reward`` (0.5); ``max_turns`` (1); ``strict_end`` (True; the
"the_answer_is" format only).
Row extras: the ground truth in ``answer`` or ``reward_spec["ground_truth"]`` (required, numeric);
``question`` (informational); ``answer_format`` (optional, overrides the config for this row, for
datasets whose prompts ask for a specific format).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from aloft.gym.core import Env, StepOutput
from aloft.types import Message

__all__ = ["ArithmeticEnv", "extract_answer", "parse_number"]

ANSWER_FORMATS = ("the_answer_is", "boxed")
DEFAULT_CONFIG: dict[str, Any] = {
    "answer_format": "the_answer_is",
    "format_reward": 0.5,
    "correct_reward": 0.5,
    "max_turns": 1,
    "strict_end": True,
}

WRONG_ANSWER_MESSAGE = "That is not correct. Try again."
MISSING_FORMAT_MESSAGES = {
    "the_answer_is": "Your reply must end with: The answer is N.",
    "boxed": "Your reply must put the final answer in \\boxed{}.",
}

# A plain decimal number: optional sign, digits with optional thousands commas, optional fraction
# part or "/denominator". Thousands groups are tried first so "1,234" is one number, not "1".
_NUMBER = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
# Lenient: any case, optional colon, optional markdown/LaTeX wrapping before the number ("**8**", "$8$").
_THE_ANSWER_IS = re.compile(rf"the\s+answer\s+is\s*:?\s*[*$]*\s*({_NUMBER})", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_END_OF_REPLY = re.compile(r"[\s.*$]*")


def parse_number(text: str) -> Fraction | None:
    """Parse "8", "-4", "8.0", "1,234", "3/4" exactly (as a Fraction); None if it is not a number."""
    cleaned = text.strip().strip("$").strip()
    if not re.fullmatch(_NUMBER, cleaned):
        return None
    try:
        return Fraction(cleaned.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def extract_answer(completion: str, answer_format: str, strict_end: bool = False) -> str | None:
    """The last answer written in ``answer_format`` in ``completion``, or None if there is none.

    ``"the_answer_is"``: the number after the last "The answer is" (case-insensitive); with
    ``strict_end`` only if nothing but ``.``, ``*``, ``$`` and whitespace follows it.
    ``"boxed"``: the content of the last ``\\boxed{...}`` (nested braces are not supported), if numeric.
    """
    if answer_format == "the_answer_is":
        matches = list(_THE_ANSWER_IS.finditer(completion))
        if not matches:
            return None
        last = matches[-1]
        if strict_end and not _END_OF_REPLY.fullmatch(completion[last.end() :]):
            return None
        return last.group(1)
    if answer_format == "boxed":
        matches = _BOXED.findall(completion)
        if not matches or parse_number(matches[-1]) is None:
            return None
        return matches[-1].strip()
    raise ValueError(f"answer_format must be one of {list(ANSWER_FORMATS)}, got {answer_format!r}")


class ArithmeticEnv(Env):
    """Numeric-answer env (single turn by default). See the module docstring for the reward."""

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        unknown = sorted(set(self.config) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(
                f"arithmetic env: unknown config keys {unknown}; accepted keys: {sorted(DEFAULT_CONFIG)}"
            )
        settings = {**DEFAULT_CONFIG, **self.config}
        if self.extras.get("answer_format") is not None:
            settings["answer_format"] = self.extras["answer_format"]
        self.answer_format: str = settings["answer_format"]
        self.format_reward: float = settings["format_reward"]
        self.correct_reward: float = settings["correct_reward"]
        self.max_turns: int = settings["max_turns"]
        self.strict_end: bool = bool(settings["strict_end"])
        self._check_settings()
        self.ground_truth: str = self._read_ground_truth()
        self._ground_truth_value = parse_number(self.ground_truth)
        self._start_episode()

    def _check_settings(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"arithmetic env: answer_format must be one of {list(ANSWER_FORMATS)}, got {self.answer_format!r}"
            )
        for name in ("format_reward", "correct_reward"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"arithmetic env: {name} must be a finite number, got {value!r}")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"arithmetic env: max_turns must be an integer >= 1, got {self.max_turns!r}")

    def _read_ground_truth(self) -> str:
        ground_truth = self.extras.get("answer")
        if ground_truth is None:
            reward_spec = self.extras.get("reward_spec") or {}
            ground_truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        if ground_truth is None:
            raise ValueError(
                "arithmetic env: the row has no ground truth; put it in the row's 'answer' column "
                "or in reward_spec.ground_truth"
            )
        if parse_number(str(ground_truth)) is None:
            raise ValueError(
                f"arithmetic env: ground truth {ground_truth!r} is not a number; "
                "this env grades numeric answers only"
            )
        return str(ground_truth).strip()

    def _start_episode(self) -> None:
        self._turns = 0
        self._format_ok = False
        self._correct = False
        self._done = False

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        self._start_episode()
        return super().reset(prompt)

    def step(self, action: str) -> StepOutput:
        if self._done:
            raise RuntimeError("arithmetic env: step() called after the episode ended; call reset() first")
        self._turns += 1
        answer = extract_answer(action, self.answer_format, self.strict_end)
        self._format_ok = answer is not None
        self._correct = answer is not None and parse_number(answer) == self._ground_truth_value
        self._done = self._correct or self._turns >= self.max_turns
        info = {
            "turn": self._turns,
            "format_ok": self._format_ok,
            "correct": self._correct,
            "extracted_answer": answer,
            "ground_truth": self.ground_truth,
        }
        if self._done:
            reward = self.format_reward * self._format_ok + self.correct_reward * self._correct
            return StepOutput(observations=[], reward=float(reward), done=True, info=info)
        retry = WRONG_ANSWER_MESSAGE if self._format_ok else MISSING_FORMAT_MESSAGES[self.answer_format]
        return StepOutput(
            observations=[{"role": "user", "content": retry}], reward=0.0, done=False, info=info
        )

    def metrics(self) -> dict[str, float]:
        """``format_ok`` and ``correct`` (0/1) of the last turn, and the number of ``turns`` taken."""
        return {
            "format_ok": float(self._format_ok),
            "correct": float(self._correct),
            "turns": float(self._turns),
        }
