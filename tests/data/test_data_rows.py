"""Row validation: what a valid row becomes, and one clear error per kind of bad row."""

from __future__ import annotations

import pytest

from aloft.data import DatasetRow, validate_row

PROMPT = [{"role": "user", "content": "Add 3 and 5."}]


def good_row(**overrides):
    row = {
        "prompt": [{"role": "system", "content": "Be brief."}, *PROMPT],
        "env_class": "arithmetic",
        "reward_spec": {"method": "rule", "ground_truth": "8"},
        "extra_info": {"index": 0},
        "question": "Add 3 and 5.",
        "answer": "8",
    }
    row.update(overrides)
    return row


def test_valid_row_becomes_a_dataset_row_whose_extras_are_what_the_env_gets():
    row = validate_row(good_row(), 4, "train.jsonl")
    assert row == DatasetRow(
        prompt=[{"role": "system", "content": "Be brief."}, *PROMPT],
        env_class="arithmetic",
        reward_spec={"method": "rule", "ground_truth": "8"},
        extra_info={"index": 0},
        extras={
            "question": "Add 3 and 5.",
            "answer": "8",
            "reward_spec": {"method": "rule", "ground_truth": "8"},
            "extra_info": {"index": 0},
        },
        index=4,
    )


def test_optional_fields_default_and_default_env_fills_a_missing_env_class():
    row = validate_row({"prompt": PROMPT, "data_source": "gsm8k"}, 0, "train.jsonl", default_env="math")
    assert row.env_class == "math"
    assert row.reward_spec is None
    assert row.extra_info == {}
    assert row.extras == {"data_source": "gsm8k", "reward_spec": None, "extra_info": {}}


def test_the_rows_own_env_class_wins_over_the_default():
    assert validate_row(good_row(), 0, "train.jsonl", default_env="math").env_class == "arithmetic"


def test_none_valued_message_keys_from_parquet_structs_are_dropped():
    prompt = [{"role": "user", "content": "hi", "name": None, "tool_calls": None}]
    assert validate_row(good_row(prompt=prompt), 0, "t.parquet").prompt == [{"role": "user", "content": "hi"}]


def test_a_plain_string_prompt_is_rejected_with_the_documented_message():
    with pytest.raises(ValueError) as error:
        validate_row(good_row(prompt="Add 3 and 5."), 17, "train.jsonl")
    assert str(error.value) == (
        "train.jsonl row 17: field 'prompt' must be a list of {role, content} messages, got str; "
        "fix the row or regenerate the file"
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"prompt": None},
            "row 3: field 'prompt' must be a list of {role, content} messages, but the row has none",
        ),
        (
            {"prompt": []},
            "row 3: field 'prompt' must be a list of {role, content} messages, got an empty list",
        ),
        ({"prompt": [PROMPT[0], "hi"]}, "row 3: field 'prompt[1]' must be a {role, content} object, got str"),
        ({"prompt": [{"role": "human", "content": "hi"}]}, "row 3: field 'prompt[0].role' must be one of"),
        (
            {"prompt": [{"role": "user", "content": 5}]},
            "row 3: field 'prompt[0].content' must be a string, got int",
        ),
        (
            {"env_class": None},
            "row 3: field 'env_class' is missing; add it to every row or give the loader a default env",
        ),
        ({"env_class": 7}, "row 3: field 'env_class' must be a non-empty string, got 7"),
        ({"env_class": ""}, "row 3: field 'env_class' must be a non-empty string"),
        (
            {"reward_spec": "8"},
            "row 3: field 'reward_spec' must be an object {method, ground_truth}, got str",
        ),
        (
            {"reward_spec": {"ground_truth": "8"}},
            "row 3: field 'reward_spec.method' must be a string, got None",
        ),
        ({"extra_info": [1]}, "row 3: field 'extra_info' must be an object, got list"),
    ],
)
def test_each_bad_field_is_named_with_file_and_row(overrides, expected):
    with pytest.raises(ValueError) as error:
        validate_row(good_row(**overrides), 3, "data/train.jsonl")
    message = str(error.value)
    assert message.startswith("data/train.jsonl " + expected.split(":")[0] + ":")
    assert expected in message
    assert "\n" not in message


def test_a_row_that_is_not_an_object():
    with pytest.raises(ValueError, match="train.jsonl row 0: a row must be a JSON object, got list"):
        validate_row([1, 2], 0, "train.jsonl")  # type: ignore[arg-type]
