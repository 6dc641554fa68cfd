"""The built-in arithmetic env, graded on hand-written completions."""

from __future__ import annotations

import pytest

from aloft.gym import make

PROMPT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Add 3 and 5. End your reply with: The answer is N."},
]


def play_one_turn(completion: str, config: dict | None = None, extras: dict | None = None):
    env = make("arithmetic", config=config, extras=extras if extras is not None else {"answer": "8"})
    env.reset(PROMPT)
    return env, env.step(completion)


# Default rewards: format 0.5 + correct 0.5.
@pytest.mark.parametrize(
    ("completion", "expected_reward"),
    [
        ("3 plus 5 is 8. The answer is 8.", 1.0),  # format + correct
        ("The answer is 7.", 0.5),  # format only
        ("3 plus 5 is 8.", 0.0),  # no "The answer is": no format, so no credit for the 8 either
        ("", 0.0),
        ("the answer is 8", 1.0),  # case-insensitive, no trailing period
        ("THE ANSWER IS: 8", 1.0),
        ("The answer is 8.0.", 1.0),  # numeric comparison: 8.0 == 8
        ("The answer is **8**.", 1.0),
        ("The answer is 5. Wait, I added wrong. The answer is 8.", 1.0),  # last occurrence wins
        ("The answer is 8. Hmm, no: the answer is 5.", 0.5),  # last occurrence wins, and it is wrong
        ("The answer is eight.", 0.0),  # a word is not a number: no format
        ("The answer is 80.", 0.5),
        ("\\boxed{8}", 0.0),  # boxed is not the default format
    ],
)
def test_the_answer_is_rewards(completion, expected_reward):
    env, out = play_one_turn(completion)
    assert out.reward == expected_reward
    assert out.done is True
    assert out.observations == []
    assert isinstance(out.reward, float)


@pytest.mark.parametrize(
    ("completion", "expected_reward"),
    [
        ("So the sum is \\boxed{8}.", 1.0),
        ("\\boxed{ 8.0 }", 1.0),
        ("\\boxed{7}", 0.5),
        ("First guess \\boxed{7}, corrected: \\boxed{8}", 1.0),  # last occurrence wins
        ("\\boxed{8} no wait \\boxed{9}", 0.5),
        ("\\boxed{eight}", 0.0),  # boxed but not a number: no format
        ("The answer is 8.", 0.0),  # not boxed
    ],
)
def test_boxed_rewards(completion, expected_reward):
    _, out = play_one_turn(completion, config={"answer_format": "boxed"})
    assert out.reward == expected_reward


def test_row_extras_can_ask_for_boxed_grading():
    _, out = play_one_turn("\\boxed{8}", extras={"answer": "8", "answer_format": "boxed"})
    assert out.reward == 1.0


@pytest.mark.parametrize(
    ("extras", "completion"),
    [
        ({"answer": 8}, "The answer is 8."),  # int ground truth
        ({"reward_spec": {"method": "rule", "ground_truth": "8"}}, "The answer is 8."),  # verl/SkyRL style
        ({"answer": "8.0"}, "The answer is 8."),
        ({"answer": "-4"}, "The answer is -4."),
        ({"answer": "1008"}, "The answer is 1,008."),  # thousands separator
        ({"answer": "0.75"}, "The answer is 3/4."),
    ],
)
def test_ground_truth_sources_and_numeric_comparison(extras, completion):
    _, out = play_one_turn(completion, extras=extras)
    assert out.reward == 1.0
    assert out.info["correct"] is True


def test_custom_reward_weights():
    # 0.2 (format) + 1.0 (correct) = 1.2; format only = 0.2.
    config = {"format_reward": 0.2, "correct_reward": 1.0}
    assert play_one_turn("The answer is 8.", config=config)[1].reward == pytest.approx(1.2)
    assert play_one_turn("The answer is 9.", config=config)[1].reward == pytest.approx(0.2)


def test_single_turn_metrics_and_info():
    env, out = play_one_turn("The answer is 7.")
    assert env.metrics() == {"format_ok": 1.0, "correct": 0.0, "turns": 1.0}
    assert out.info == {
        "turn": 1,
        "format_ok": True,
        "correct": False,
        "extracted_answer": "7",
        "ground_truth": "8",
    }


def test_multi_turn_retry_flow_rewards_only_the_final_turn():
    env = make("arithmetic", config={"max_turns": 3}, extras={"answer": "8"})
    env.reset(PROMPT)

    first = env.step("I am not sure.")
    assert (first.reward, first.done) == (0.0, False)
    assert first.observations == [{"role": "user", "content": "Your reply must end with: The answer is N."}]

    second = env.step("The answer is 7.")
    assert (second.reward, second.done) == (0.0, False)
    assert second.observations == [{"role": "user", "content": "That is not correct. Try again."}]

    third = env.step("Sorry. The answer is 8.")
    assert (third.reward, third.done, third.observations) == (1.0, True, [])
    assert env.metrics() == {"format_ok": 1.0, "correct": 1.0, "turns": 3.0}


def test_multi_turn_ends_early_when_correct():
    env = make("arithmetic", config={"max_turns": 3}, extras={"answer": "8"})
    env.reset(PROMPT)
    out = env.step("The answer is 8.")
    assert (out.reward, out.done) == (1.0, True)
    assert env.metrics()["turns"] == 1.0


def test_multi_turn_exhausted_gives_the_last_turns_reward():
    env = make("arithmetic", config={"max_turns": 2}, extras={"answer": "8"})
    env.reset(PROMPT)
    assert env.step("The answer is 7.").reward == 0.0
    last = env.step("The answer is 6.")
    assert (last.reward, last.done) == (0.5, True)  # format only, on the final turn
    assert env.metrics() == {"format_ok": 1.0, "correct": 0.0, "turns": 2.0}


def test_boxed_retry_message():
    env = make("arithmetic", config={"max_turns": 2, "answer_format": "boxed"}, extras={"answer": "8"})
    env.reset(PROMPT)
    out = env.step("The answer is 8.")
    assert out.observations == [
        {"role": "user", "content": "Your reply must put the final answer in \\boxed{}."}
    ]


def test_reset_starts_a_fresh_episode_and_step_after_done_fails():
    env = make("arithmetic", config={"max_turns": 2}, extras={"answer": "8"})
    env.reset(PROMPT)
    env.step("The answer is 8.")
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("The answer is 8.")
    messages, _ = env.reset(PROMPT)
    assert messages == PROMPT
    assert env.metrics() == {"format_ok": 0.0, "correct": 0.0, "turns": 0.0}
    assert env.step("The answer is 7.").done is False


@pytest.mark.parametrize(
    ("config", "extras", "message"),
    [
        ({"max_turn": 2}, {"answer": "8"}, r"unknown config keys \['max_turn'\]; accepted keys"),
        ({"answer_format": "latex"}, {"answer": "8"}, "answer_format must be one of"),
        ({"max_turns": 0}, {"answer": "8"}, "max_turns must be an integer >= 1"),
        ({"format_reward": float("nan")}, {"answer": "8"}, "format_reward must be a finite number"),
        ({}, {"question": "Add 3 and 5."}, "the row has no ground truth"),
        ({}, {"answer": "eight"}, "ground truth 'eight' is not a number"),
    ],
)
def test_configuration_errors_are_clear(config, extras, message):
    with pytest.raises(ValueError, match=message):
        make("arithmetic", config=config, extras=extras)


@pytest.mark.parametrize(
    ("completion", "strict", "expected_reward"),
    [
        ("The answer is 8.\n\nThis is a classic example of addition.", True, 0.0),  # does not *end* with it
        ("The answer is 8.\n\nThis is a classic example of addition.", False, 1.0),
        ("3 + 5 = 8. The answer is **8**.  \n", True, 1.0),
        ("The answer is 7. No wait. The answer is 8", True, 1.0),
    ],
)
def test_strict_end_requires_the_answer_to_end_the_reply(completion, strict, expected_reward):
    env = make("arithmetic", config={"strict_end": strict}, extras={"answer": "8"})
    assert env.step(completion).reward == expected_reward
