"""Built-in dataset builders: deterministic, valid rows that the arithmetic env can grade."""

from __future__ import annotations

import re
import sys

import pytest

from aloft.data import build_dataset, dataset_builders, validate_row
from aloft.gym import check_env, make


def test_builders_are_listed():
    names = dataset_builders()
    assert names == sorted(names)
    assert {"arithmetic", "reasoning_gym", "math", "mmath", "search", "sql", "code"} <= set(names)


def test_arithmetic_rows_have_the_documented_shape():
    (row,) = build_dataset("arithmetic", n=1, seed=0, low=3, high=3)
    assert row == {
        "prompt": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Add 3 and 3. End your reply with: The answer is N."},
        ],
        "env_class": "arithmetic",
        "reward_spec": {"method": "rule", "ground_truth": "6"},
        "extra_info": {"index": 0},
        "question": "Add 3 and 3.",
        "answer": "6",
    }


def test_arithmetic_answers_match_the_questions_and_stay_in_range():
    rows = build_dataset("arithmetic", n=200, seed=1)
    operands = set()
    for index, raw in enumerate(rows):
        a, b = map(int, re.fullmatch(r"Add (\d+) and (\d+)\.", raw["question"]).groups())
        operands.update((a, b))
        assert raw["answer"] == raw["reward_spec"]["ground_truth"] == str(a + b)
        validate_row(raw, index, "arithmetic")
    assert operands == set(range(1, 10))  # 200 draws cover every single digit 1..9


def test_arithmetic_is_deterministic_per_seed():
    assert build_dataset("arithmetic", n=20, seed=4) == build_dataset("arithmetic", n=20, seed=4)
    assert build_dataset("arithmetic", n=20, seed=4) != build_dataset("arithmetic", n=20, seed=5)


def test_arithmetic_rows_pass_the_env_checks_and_a_correct_reply_scores_one():
    rows = build_dataset("arithmetic", n=2, seed=0)
    check_env("arithmetic", rows)
    row = validate_row(rows[0], 0, "arithmetic")
    env = make(row.env_class, extras=row.extras)
    env.reset(row.prompt)
    assert env.step(f"The answer is {row.extras['answer']}.").reward == 1.0


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", {}, r"unknown dataset builder 'nope'; available: \['arithmetic', "),
        ("arithmetic", {"hi": 3}, r"unknown options \['hi'\]; accepted: \['low', 'high'\]"),
        ("arithmetic", {"low": 5, "high": 2}, "need integers low <= high"),
    ],
)
def test_builder_errors_name_the_fix(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_dataset(name, n=3, seed=0, **options)


def test_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        build_dataset("arithmetic", n=0, seed=0)


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "gsm_symbolic"])
def test_reasoning_gym_rows_are_deterministic_numeric_and_ask_for_boxed(dataset):
    rows = build_dataset("reasoning_gym", n=3, seed=11, dataset=dataset)
    assert rows == build_dataset("reasoning_gym", n=3, seed=11, dataset=dataset)
    assert rows != build_dataset("reasoning_gym", n=3, seed=12, dataset=dataset)
    for index, raw in enumerate(rows):
        row = validate_row(raw, index, dataset)
        assert row.env_class == "arithmetic"
        assert row.prompt[-1]["content"] == f"{raw['question']}\nPut your final answer in \\boxed{{}}."
        assert row.extras["answer_format"] == "boxed"
        assert row.reward_spec == {"method": "rule", "ground_truth": raw["answer"]}
        env = make(row.env_class, extras=row.extras)  # graded in boxed mode from the row alone
        env.reset(row.prompt)
        assert env.step(f"Working... \\boxed{{{raw['answer']}}}").reward == 1.0
    check_env("arithmetic", rows)


def test_reasoning_gym_refuses_non_numeric_and_unknown_datasets():
    with pytest.raises(
        ValueError, match=r"'word_ladder' item 0 has the non-numeric answer .* pick a numeric dataset"
    ):
        build_dataset("reasoning_gym", n=2, seed=0, dataset="word_ladder")
    with pytest.raises(
        ValueError, match=r"reasoning-gym has no dataset 'nope'; available: \[.*'basic_arithmetic'"
    ):
        build_dataset("reasoning_gym", n=2, seed=0, dataset="nope")


def test_reasoning_gym_missing_names_the_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` fail
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        build_dataset("reasoning_gym", n=2, seed=0)
