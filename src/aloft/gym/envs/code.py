"""Code envs: the model writes a Python program, the env runs it against the row's tests in the sandbox.

Two ids share this module:

- ``code`` (``CodeEnv``): one turn. Reward 1.0 when every test passes, else 0.0 (or, with
  ``partial_credit``, the fraction of stdin/stdout cases passed).
- ``code_feedback`` (``CodeFeedbackEnv``): up to ``max_turns`` (default 3) attempts. After a
  failing attempt the env answers with a user message holding the test feedback (the traceback of
  the failing assertion, or the first failing case's input, expected and actual output, or the
  timeout); the reward is given on the final turn only (earlier turns get 0), which is the first
  passing turn or the last one allowed.

**Code extraction.** The program is the *last* fenced block tagged ``python`` / ``py`` /
``python3`` in the completion (```` ```python ... ``` ````); failing that, the last untagged
fenced block. A block must be closed by a fence at the start of a line (a reply cut off inside
its code block has no code); the opening fence may follow text on its line. No block:
``format_ok`` is 0, the reward 0, and the feedback env asks for a ```` ```python ```` block.

**Row format** (the dataset row's free columns, which reach the env as ``extras``)::

    # a function task (HumanEval style)
    {"prompt": [...chat...], "env_class": "code", "reward_spec": {"method": "code_tests"},
     "task_type": "function",                 # optional: inferred from the fields present
     "code_prompt": "def add(a, b):\\n    \\"\\"\\"Add.\\"\\"\\"\\n",   # optional: signature + docstring
     "test": "def check(candidate):\\n    assert candidate(1, 2) == 3\\n",
     "entry_point": "add",
     "task_id": "HumanEval/0"}                # optional, informational

    # a stdin/stdout task
    {"prompt": [...], "env_class": "code",
     "task_type": "stdio",
     "test_cases": [{"input": "1 2\\n", "output": "3\\n"}, ...]}

A function task runs one program: ``code_prompt`` (so its imports and helper functions exist),
the extracted code, ``test``, then ``check(<entry_point>)``; it passes when that program exits with
status 0 within the limits *and* prints, as its last line, a token it read from stdin before the
code ran (so ``exit(0)`` before the tests does not pass; the token and the name of the variable
holding it derive from the code and a per-process secret, so the env stays deterministic). As in
the original HumanEval harness, the tests are only as strong as their asserts (an object whose
``__eq__`` is always true fools ``==``), and code running in the same process could find the token
by introspection. If the extracted code does not define ``entry_point`` it is taken as the
function's body and appended right after ``code_prompt`` (the original harness's layout).
A stdin/stdout task runs the extracted program once per case with the case's ``input`` on stdin;
a case passes when the program exits with 0 and its stdout equals ``output`` after whitespace
normalisation (both split into whitespace-separated tokens; so line breaks and trailing spaces do
not matter). Without ``partial_credit`` the cases stop at the first failure.

**Config** (all optional): ``max_turns`` (1 for ``code``, 3 for ``code_feedback``);
``partial_credit`` (False); ``feedback_chars`` (1500: the most characters of program output quoted
in feedback); ``prepend_prompt`` (True: run ``code_prompt`` before a function task's code);
``sandbox``: a dict of ``aloft.gym.sandbox.SandboxLimits`` fields (default ``cpu_s=5, wall_s=10,
memory_mb=512``) applied to every run.

**Metrics** (per episode, from the last turn unless said otherwise): ``passed`` (all tests
passed), ``pass_fraction`` (cases passed / all cases; after a stop at the first failure
the cases not run count as failed), ``format_ok`` (a code block was found), ``timeouts`` (runs stopped by
the wall or CPU limit, whole episode), ``runtime_errors`` (runs that failed otherwise, whole
episode), ``tests_run`` (sandbox runs, whole episode) and ``turns``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from aloft.gym.core import Env, StepOutput
from aloft.gym.sandbox import SandboxLimits, SandboxResult, run_python
from aloft.gym.tools.python import clip_middle, status_line
from aloft.types import Message

__all__ = ["CodeEnv", "CodeFeedbackEnv", "CheckReport", "extract_code", "normalize_output"]

TASK_TYPES = ("function", "stdio")
DEFAULT_CONFIG: dict[str, Any] = {
    "max_turns": 1,
    "partial_credit": False,
    "feedback_chars": 1500,
    "prepend_prompt": True,
    "sandbox": {},
}
DEFAULT_SANDBOX: dict[str, Any] = {"cpu_s": 5.0, "wall_s": 10.0, "memory_mb": 512}

NO_CODE_MESSAGE = (
    "I could not find a code block in your reply. Reply with your complete solution in a single "
    "```python code block."
)
RETRY_INSTRUCTION = "Fix the code and reply with the complete corrected program in a ```python code block."

# A fenced block: an opening fence with an optional language tag, then a newline, the body, and a
# closing fence at the start of a line. (The opening fence may follow text on its line: models write
# "Here it is: ```python".)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")
_TOKEN_KEY = secrets.token_bytes(32)
"""Per-process secret behind the function tasks' completion token (see ``CodeEnv._run_function_task``)."""


def extract_code(completion: str) -> str | None:
    """The last ```` ```python ```` block's code; else the last untagged block's; else None."""
    blocks = [(match.group(1).lower(), match.group(2)) for match in _FENCE.finditer(completion)]
    for wanted in (_PYTHON_TAGS, ("",)):
        chosen = [code for tag, code in blocks if tag in wanted]
        if chosen and chosen[-1].strip():
            return chosen[-1]
    return None


def normalize_output(text: str) -> list[str]:
    """Whitespace-separated tokens: how stdin/stdout answers are compared."""
    return text.split()


@dataclass(frozen=True)
class CheckReport:
    """What running one solution against a row's tests gave."""

    passed: int
    """Tests passed (a function task has one test: its ``check``)."""
    total: int
    timeouts: int
    """Runs stopped by the wall or CPU limit."""
    runtime_errors: int
    """Runs that exited non-zero for another reason (exceptions, failed assertions, memory)."""
    runs: int
    """Sandbox runs made."""
    feedback: str
    """For the model: why the first failing test failed ("" when all passed)."""

    @property
    def all_passed(self) -> bool:
        return self.passed == self.total


class CodeEnv(Env):
    """Run extracted code against function or stdin/stdout tests. See the module docstring."""

    default_max_turns = 1

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        unknown = sorted(set(self.config) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(
                f"code env: unknown config keys {unknown}; accepted keys: {sorted(DEFAULT_CONFIG)}"
            )
        settings = {**DEFAULT_CONFIG, "max_turns": self.default_max_turns, **self.config}
        self.max_turns: int = settings["max_turns"]
        self.partial_credit = bool(settings["partial_credit"])
        self.feedback_chars: int = settings["feedback_chars"]
        self.prepend_prompt = bool(settings["prepend_prompt"])
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"code env: max_turns must be an integer >= 1, got {self.max_turns!r}")
        if (
            isinstance(self.feedback_chars, bool)
            or not isinstance(self.feedback_chars, int)
            or self.feedback_chars < 100
        ):
            raise ValueError(
                f"code env: feedback_chars must be an integer >= 100, got {self.feedback_chars!r}"
            )
        sandbox = settings["sandbox"]
        if not isinstance(sandbox, dict):
            raise ValueError(
                f"code env: config 'sandbox' must be a dict of SandboxLimits fields, got {sandbox!r}"
            )
        try:
            self.limits = SandboxLimits(**{**DEFAULT_SANDBOX, **sandbox})
        except TypeError as error:
            raise ValueError(f"code env: bad 'sandbox' config ({error})") from None
        self.task_type = self._read_task()
        self._start_episode()

    # ---- the row -------------------------------------------------------------------------------
    def _read_task(self) -> str:
        extras = self.extras
        task_type = extras.get("task_type")
        if task_type is None:
            task_type = "stdio" if "test_cases" in extras else "function"
        if task_type not in TASK_TYPES:
            raise ValueError(f"code env: task_type must be one of {list(TASK_TYPES)}, got {task_type!r}")
        if task_type == "function":
            for name in ("test", "entry_point"):
                if not isinstance(extras.get(name), str) or not extras[name].strip():
                    raise ValueError(
                        f"code env: a function task needs a non-empty string column {name!r} "
                        "(see the row format in aloft.gym.envs.code)"
                    )
            if not extras["entry_point"].isidentifier():
                raise ValueError(
                    f"code env: entry_point must be a function name, got {extras['entry_point']!r}"
                )
            code_prompt = extras.get("code_prompt", "")
            if not isinstance(code_prompt, str):
                raise ValueError(f"code env: code_prompt must be a string, got {type(code_prompt).__name__}")
        else:
            cases = extras.get("test_cases")
            if not isinstance(cases, list) or not cases:
                raise ValueError("code env: a stdio task needs a non-empty list column 'test_cases'")
            for index, case in enumerate(cases):
                if not (
                    isinstance(case, dict)
                    and isinstance(case.get("input"), str)
                    and isinstance(case.get("output"), str)
                ):
                    raise ValueError(
                        f"code env: test_cases[{index}] must be {{'input': str, 'output': str}}, got {case!r}"
                    )
        return task_type

    # ---- episode -------------------------------------------------------------------------------
    def _start_episode(self) -> None:
        self._turns = 0
        self._done = False
        self._format_ok = False
        self._passed = False
        self._pass_fraction = 0.0
        self._timeouts = 0
        self._runtime_errors = 0
        self._runs = 0

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        self._start_episode()
        return super().reset(prompt)

    def step(self, action: str) -> StepOutput:
        if self._done:
            raise RuntimeError("code env: step() called after the episode ended; call reset() first")
        self._turns += 1
        code = extract_code(action)
        self._format_ok = code is not None
        info: dict[str, Any] = {
            "turn": self._turns,
            "format_ok": self._format_ok,
            "task_type": self.task_type,
        }
        if code is None:
            self._passed, self._pass_fraction = False, 0.0
            feedback = NO_CODE_MESSAGE
        else:
            report = self.run_tests(code)
            self._passed = report.all_passed
            self._pass_fraction = report.passed / report.total
            self._timeouts += report.timeouts
            self._runtime_errors += report.runtime_errors
            self._runs += report.runs
            info.update(passed=report.passed, total=report.total, timeouts=report.timeouts)
            feedback = f"{report.feedback}\n\n{RETRY_INSTRUCTION}"
        self._done = self._passed or self._turns >= self.max_turns
        if self._done:
            return StepOutput(observations=[], reward=self._reward(), done=True, info=info)
        return StepOutput(
            observations=[{"role": "user", "content": feedback}], reward=0.0, done=False, info=info
        )

    def _reward(self) -> float:
        if self._passed:
            return 1.0
        return self._pass_fraction if self.partial_credit else 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "passed": float(self._passed),
            "pass_fraction": float(self._pass_fraction),
            "format_ok": float(self._format_ok),
            "timeouts": float(self._timeouts),
            "runtime_errors": float(self._runtime_errors),
            "tests_run": float(self._runs),
            "turns": float(self._turns),
        }

    # ---- running the tests ---------------------------------------------------------------------
    def run_tests(self, code: str) -> CheckReport:
        """Run ``code`` against this row's tests in the sandbox (no episode state is changed)."""
        if self.task_type == "function":
            return self._run_function_task(code)
        return self._run_stdio_task(code)

    def function_program(self, code: str, token_name: str = "_aloft_token") -> str:
        """The program a function task runs: prompt, code, test, ``check(entry_point)``.

        Its first line reads a token from stdin into the variable ``token_name`` and its last line
        prints it, so only a program that gets through ``check`` prints the token.
        """
        entry_point = self.extras["entry_point"]
        code_prompt = self.extras.get("code_prompt", "") if self.prepend_prompt else ""
        defines_entry = re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE)
        if code_prompt and not defines_entry:  # a bare body: complete the prompt's stub with it
            solution = code_prompt.rstrip("\n") + "\n" + code
        else:
            solution = f"{code_prompt}\n\n{code}" if code_prompt else code
        header = f"{token_name} = __import__('sys').stdin.readline().strip()\n"  # one line: numbers stay put
        return f"{header}{solution}\n\n{self.extras['test']}\n\ncheck({entry_point})\nprint({token_name})\n"

    def _run_function_task(self, code: str) -> CheckReport:
        # The token and its variable's name depend on the code and a per-process secret: the same
        # reply always gets the same run (the env stays deterministic), but no reply can know them.
        digest = hmac.new(_TOKEN_KEY, code.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
        token, token_name = digest[:32], f"_aloft_{digest[32:40]}"
        result = run_python(self.function_program(code, token_name), stdin=token + "\n", limits=self.limits)
        lines = result.stdout.splitlines()
        finished = bool(lines) and lines[-1] == token
        if result.ok and finished:
            return CheckReport(passed=1, total=1, timeouts=0, runtime_errors=0, runs=1, feedback="")
        if finished:  # never show the token
            result = dataclasses.replace(result, stdout="\n".join(lines[:-1]))
        details = [self._describe_failure(result)]
        if result.ok:
            details.append("[the program exited before the tests finished]")
        feedback = "Your code failed the tests.\n" + "\n".join(part for part in details if part)
        return CheckReport(
            passed=0,
            total=1,
            timeouts=int(result.timed_out),
            runtime_errors=int(not result.timed_out),
            runs=1,
            feedback=feedback,
        )

    def _run_stdio_task(self, code: str) -> CheckReport:
        cases = self.extras["test_cases"]
        passed = timeouts = errors = runs = 0
        first_failure = ""
        for index, case in enumerate(cases):
            result = run_python(code, stdin=case["input"], limits=self.limits)
            runs += 1
            ok = result.ok and normalize_output(result.stdout) == normalize_output(case["output"])
            if ok:
                passed += 1
                continue
            timeouts += result.timed_out
            errors += not result.ok and not result.timed_out
            if not first_failure:
                first_failure = self._describe_case(index, len(cases), case, result)
            if not self.partial_credit:
                break
        feedback = ""
        if passed < len(cases):
            feedback = f"Your program passed {passed} of {len(cases)} test cases" + (
                "." if self.partial_credit else " before the first failure."
            )
            feedback += "\n" + first_failure
        return CheckReport(
            passed=passed,
            total=len(cases),
            timeouts=timeouts,
            runtime_errors=errors,
            runs=runs,
            feedback=feedback,
        )

    def _describe_failure(self, result: SandboxResult) -> str:
        parts = []
        if result.stderr.strip():
            parts.append(clip_middle(result.stderr.rstrip("\n"), self.feedback_chars))
        if result.stdout.strip():
            parts.append("Output:\n" + clip_middle(result.stdout.rstrip("\n"), self.feedback_chars))
        status = status_line(result, self.limits)
        if status:
            parts.append(status)
        return "\n".join(parts)

    def _describe_case(self, index: int, count: int, case: dict[str, str], result: SandboxResult) -> str:
        quote = self.feedback_chars // 3
        lines = [
            f"Test case {index + 1} of {count} failed.",
            "Input:\n" + clip_middle(case["input"].rstrip("\n"), quote),
            "Expected output:\n" + clip_middle(case["output"].rstrip("\n"), quote),
            "Your output:\n" + (clip_middle(result.stdout.rstrip("\n"), quote) or "(nothing)"),
        ]
        if result.stderr.strip():
            lines.append("Errors:\n" + clip_middle(result.stderr.rstrip("\n"), quote))
        status = status_line(result, self.limits)
        if status:
            lines.append(status)
        return "\n".join(lines)


class CodeFeedbackEnv(CodeEnv):
    """``CodeEnv`` with test feedback and retries (``max_turns`` 3 by default)."""

    default_max_turns = 3
