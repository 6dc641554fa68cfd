"""The ``math`` and ``math_tool`` envs: extraction, math-verify grading (also from worker threads,
with a hard time limit), rewards, feedback turns and calculator calls."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from aloft.gym import check_env, make
from aloft.gym.envs.math import TOOL_INSTRUCTIONS, extract_math_answer
from aloft.gym.envs.math_grading import MathGrader, default_grader, extract_boxed, extract_hash_answer

PROMPT = [
    {"role": "system", "content": "Put the final answer in \\boxed{}."},
    {"role": "user", "content": "What is half of one?"},
]
ROWS = [
    {"prompt": PROMPT, "env_class": "math", "answer": "\\frac{1}{2}"},
    {"prompt": PROMPT, "env_class": "math", "reward_spec": {"method": "rule", "ground_truth": "8"}},
    {"prompt": PROMPT, "env_class": "math", "answer": 72},
]


def play(
    completions: list[str], env_id: str = "math", config: dict | None = None, answer: str = "\\frac{1}{2}"
):
    env = make(env_id, config=config, extras={"answer": answer})
    env.reset(PROMPT)
    outputs = []
    for completion in completions:
        outputs.append(env.step(completion))
        if outputs[-1].done:
            break
    return env, outputs


# ---- extraction -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{5}.", "5"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{ \\left\\{ 1, 2 \\right\\} }", "\\left\\{ 1, 2 \\right\\}"),
        ("first \\boxed{1} then \\boxed{\\sqrt{2}}", "\\sqrt{2}"),
        ("\\fbox{7}", "7"),
        ("\\boxed 5", "5"),
        ("\\boxed{unclosed {", None),
        ("no answer", None),
        ("\\boxed{}", ""),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("work\n#### 72", "72"),
        ("#### 1\nmore\n####  1,000 \n", "1,000"),
        ("#### ", None),
        ("nothing", None),
    ],
)
def test_extract_hash_answer(text, expected):
    assert extract_hash_answer(text) == expected


def test_extract_math_answer_formats():
    text = "#### 3\nand \\boxed{4}"
    assert extract_math_answer(text) == "4"  # auto: boxed first
    assert extract_math_answer(text, "hash") == "3"
    assert extract_math_answer("#### 3", "boxed") is None
    assert extract_math_answer("#### 3", "auto") == "3"
    with pytest.raises(ValueError, match="answer_format"):
        extract_math_answer("x", "latex")


# ---- grading ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        ("0.5", "\\frac{1}{2}", True),
        ("\\dfrac{1}{2}", "1/2", True),
        ("x = 5", "5", True),
        ("1,000", "1000", True),
        ("\\frac{\\pi}{2}", "\\pi/2", True),
        ("\\sqrt{18}", "3\\sqrt{2}", True),
        ("(1, 2)", "(1,2)", True),
        ("7", "8", False),
        ("0.6", "\\frac{1}{2}", False),
        ("banana", "8", False),
    ],
)
def test_math_verify_equivalences(answer, truth, correct):
    grade = default_grader().verify(answer, truth)
    assert grade.correct is correct
    assert grade.timed_out is False


def test_a_pathological_answer_times_out_instead_of_hanging():
    grader = MathGrader(max_workers=1)
    try:
        start = time.perf_counter()
        grade = grader.verify("9^{9^{9}}", "8", timeout_s=1.0)
        assert time.perf_counter() - start < 5
        assert (grade.correct, grade.timed_out) == (False, True)
        assert grader.verify("0.5", "\\frac12").correct  # a fresh worker takes over
    finally:
        grader.close()
        grader.close()
    with pytest.raises(RuntimeError, match="closed"):
        grader.verify("0.5", "\\frac12")


def test_grading_from_worker_threads():
    def grade(index: int) -> tuple[float, bool]:
        answer = "0.5" if index % 2 == 0 else "0.25"
        env = make("math", extras={"answer": "\\frac{1}{2}"})
        env.reset(PROMPT)
        out = env.step(f"\\boxed{{{answer}}}")
        return out.reward, threading.current_thread() is threading.main_thread()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(grade, range(8)))
    assert [reward for reward, _ in results] == pytest.approx([1.0, 0.1] * 4)
    assert not any(on_main for _, on_main in results)


# ---- math ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("Half is \\boxed{\\frac{1}{2}}.", 1.0),
        ("\\boxed{0.5}", 1.0),
        ("The answer:\n#### 0.5", 1.0),
        ("\\boxed{2}", 0.1),
        ("It is one half.", 0.0),
        ("", 0.0),
    ],
)
def test_math_rewards(completion, reward):
    env, (out,) = play([completion])
    assert out.reward == pytest.approx(reward)
    assert out.done is True and out.observations == []
    assert isinstance(out.reward, float)


def test_math_info_and_metrics():
    env, (out,) = play(["\\boxed{2}"])
    assert out.info == {
        "turn": 1,
        "format_ok": True,
        "correct": False,
        "extracted_answer": "2",
        "ground_truth": "\\frac{1}{2}",
        "verify_timed_out": False,
    }
    assert env.metrics() == {"format_ok": 1.0, "correct": 0.0, "turns": 1.0, "verify_timeouts": 0.0}


@pytest.mark.parametrize(
    ("extras", "truth"),
    [
        ({"answer": "#### 72"}, "72"),
        ({"answer": "Step 1 ... \\boxed{72}"}, "72"),
        ({"reward_spec": {"ground_truth": 72}}, "72"),
    ],
)
def test_ground_truth_sources(extras, truth):
    env = make("math", extras=extras)
    env.reset(PROMPT)
    assert env.ground_truth == truth
    assert env.step("\\boxed{72}").reward == 1.0


def test_custom_rewards_and_answer_format():
    _, (out,) = play(["#### 0.5"], config={"answer_format": "boxed"})
    assert out.reward == 0.0
    _, (out,) = play(["\\boxed{3}"], config={"format_reward": 0.0, "correct_reward": 1.0})
    assert out.reward == 0.0
    _, (out,) = play(["\\boxed{0.5}"], config={"format_reward": 0.0, "correct_reward": 2.0})
    assert out.reward == 2.0


def test_math_feedback_turns():
    env, outputs = play(["no idea", "\\boxed{3}", "\\boxed{1/2}"], config={"max_turns": 3, "feedback": True})
    assert [o.reward for o in outputs] == [0.0, 0.0, 1.0]
    assert outputs[0].observations == [{"role": "user", "content": "Put your final answer in \\boxed{}."}]
    assert "not correct" in outputs[1].observations[0]["content"]
    assert env.metrics()["turns"] == 3.0


def test_math_without_feedback_ends_on_the_first_answer():
    _, outputs = play(["\\boxed{3}", "\\boxed{0.5}"], config={"max_turns": 3})
    assert len(outputs) == 1 and outputs[0].done


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"answer_fmt": "boxed"}, "unknown config keys"),
        ({"answer_format": "latex"}, "answer_format must be one of"),
        ({"max_turns": 0}, "max_turns must be an integer"),
        ({"format_reward": float("nan")}, "format_reward must be a finite number"),
        ({"verify_timeout_s": 0}, "verify_timeout_s must be > 0"),
    ],
)
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        make("math", config=config, extras={"answer": "1"})


def test_missing_ground_truth():
    with pytest.raises(ValueError, match="no ground truth"):
        make("math", extras={"question": "?"})


def test_step_after_done_raises_and_reset_starts_over():
    env, _ = play(["\\boxed{0.5}"])
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("\\boxed{0.5}")
    env.reset(PROMPT)
    assert env.step("\\boxed{0.5}").reward == 1.0


# ---- math_tool -------------------------------------------------------------------------------------
def test_math_tool_calculator_round_trip():
    env = make("math_tool", extras={"answer": "1764"})
    messages, _ = env.reset(PROMPT)
    assert messages[0]["content"].endswith(TOOL_INSTRUCTIONS)
    assert PROMPT[0]["content"] == "Put the final answer in \\boxed{}."  # the row is untouched
    first = env.step("I need 42 squared: <calculator>42 ** 2</calculator>")
    assert first.done is False and first.reward == 0.0
    assert first.observations == [{"role": "user", "content": "<result>\n1764\n</result>"}]
    assert first.info["tool_calls"] == 1
    second = env.step("So the answer is \\boxed{1764}.")
    assert (second.done, second.reward) == (True, 1.0)
    metrics = env.metrics()
    assert metrics["tool_calls"] == 1.0 and metrics["tool_errors"] == 0.0 and metrics["turns"] == 2.0
    env.close()
    env.close()


def test_math_tool_errors_become_observations_and_metrics():
    env = make("math_tool", extras={"answer": "2"})
    env.reset(PROMPT)
    out = env.step("<calculator>1/0</calculator> and <calculator>__import__('os')</calculator>")
    content = out.observations[0]["content"]
    assert content.count("<result>") == 2
    assert "Error: division by zero" in content
    assert "unknown function" in content
    assert env.metrics()["tool_errors"] == 2.0


def test_math_tool_unclosed_call_and_call_limit():
    env = make("math_tool", config={"max_tool_calls_per_turn": 2}, extras={"answer": "2"})
    env.reset(PROMPT)
    out = env.step("<calculator>1+1</calculator><calculator>2+2</calculator><calculator>3+3")
    content = out.observations[0]["content"]
    assert "2" in content and "4" in content and "6" not in content
    assert "at most 2 calculator calls" in content
    env.reset(PROMPT)
    assert env.step("<calculator>5*5").observations[0]["content"] == "<result>\n25\n</result>"


def test_math_tool_turn_limit_and_no_call_no_answer():
    env, outputs = play(["<calculator>1</calculator>"] * 5, env_id="math_tool", config={"max_turns": 2})
    assert [o.done for o in outputs] == [False, True]
    assert outputs[-1].reward == 0.0 and outputs[-1].info["turn_limit"] is True
    _, outputs = play(["I give up."], env_id="math_tool")
    assert outputs[0].done and outputs[0].reward == 0.0


def test_math_tool_feedback():
    env, outputs = play(
        ["hmm", "\\boxed{3}", "<calculator>1/2</calculator>", "\\boxed{0.5}"],
        env_id="math_tool",
        config={"feedback": True, "max_turns": 4},
    )
    assert [o.reward for o in outputs] == [0.0, 0.0, 0.0, 1.0]
    assert "<calculator>" in outputs[0].observations[0]["content"]
    assert "not correct" in outputs[1].observations[0]["content"]
    assert outputs[2].observations[0]["content"] == "<result>\n0.5\n</result>"


def test_math_tool_without_instructions_and_without_system_message():
    env = make("math_tool", config={"tool_instructions": False}, extras={"answer": "1"})
    assert env.reset(PROMPT)[0] == PROMPT
    env = make("math_tool", extras={"answer": "1"})
    messages, _ = env.reset([PROMPT[1]])
    assert messages[0] == {"role": "system", "content": TOOL_INSTRUCTIONS}


def test_math_tool_from_a_worker_thread():
    def episode() -> list[float]:
        _, outputs = play(
            ["<calculator>sqrt(16)</calculator>", "\\boxed{4}"], env_id="math_tool", answer="4.0"
        )
        return [o.reward for o in outputs]

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert pool.submit(episode).result(timeout=60) == [0.0, 1.0]


# ---- conformance ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env_id", "config"),
    [
        ("math", None),
        ("math", {"max_turns": 3, "feedback": True}),
        ("math_tool", None),
        ("math_tool", {"feedback": True}),
    ],
)
def test_check_env(env_id, config):
    check_env(env_id, ROWS, config=config)
