"""Built-in dataset builders: ``build_dataset(name, n, seed, **options) -> raw rows``.

The rows are plain dicts in the row format of ``aloft.data.rows``, ready for ``write_rows``; the
same (name, n, seed, options) always gives the same rows.

- ``"arithmetic"``: "Add a and b." with a, b drawn from ``low..high`` (1..9), graded by the
  ``arithmetic`` env ("The answer is N.").
- ``"reasoning_gym"``: any reasoning-gym generator with numeric answers (``dataset="basic_arithmetic"``,
  ``"gsm_symbolic"``, ``"chain_sum"``, ...), graded by the ``arithmetic`` env in ``boxed`` mode.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import random
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "SYSTEM_PROMPT",
    "build_dataset",
    "dataset_builder",
    "dataset_builders",
    "dataset_splits",
    "is_fixed_dataset",
    "stable_hash",
]

SYSTEM_PROMPT = "You are a helpful assistant."
BOXED_INSTRUCTION = "Put your final answer in \\boxed{}."

RawRow = dict[str, Any]
Builder = Callable[..., list[RawRow]]
_BUILDERS: dict[str, Builder] = {}

# The numbers the arithmetic env can grade: "8", "-4", "8.0", "1,234", "3/4".
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key`` that never changes between runs, machines or Python versions.

    Fixed datasets split train/eval by it, so adding an item never moves the others.
    """
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def dataset_builder(
    name: str, splits: tuple[str, ...] = ("train", "eval"), fixed_dataset: bool = False
) -> Callable[[Builder], Builder]:
    """Register ``function(n, seed, [split], **options) -> raw rows`` as the builder ``name``.

    ``splits``: the split names it accepts. ``fixed_dataset``: it draws from a fixed set of items and
    ``n=0`` asks for every one of them.
    """
    return _builder(name, splits, fixed_dataset)


def _builder(
    name: str, splits: tuple[str, ...] = ("train", "eval"), fixed_dataset: bool = False
) -> Callable[[Builder], Builder]:
    def add(function: Builder) -> Builder:
        function.splits = splits  # type: ignore[attr-defined]
        function.fixed_dataset = fixed_dataset  # type: ignore[attr-defined]
        _BUILDERS[name] = function
        return function

    return add


# Builders that live in their own module (with heavier data or dependencies): imported on first use.
_LAZY_SOURCES: dict[str, str] = {
    "math": "aloft.data.sources.math",
    "mmath": "aloft.data.sources.math",
    "code": "aloft.data.sources.code",
    "sql": "aloft.data.sources.sql",
    "search": "aloft.data.sources.search",
}


def dataset_builders() -> list[str]:
    """Names accepted by ``build_dataset``, sorted."""
    present = {name for name, module in _LAZY_SOURCES.items() if importlib.util.find_spec(module)}
    return sorted(set(_BUILDERS) | present)


def _builder_named(name: str) -> Builder:
    if name not in _BUILDERS and name in _LAZY_SOURCES and importlib.util.find_spec(_LAZY_SOURCES[name]):
        importlib.import_module(_LAZY_SOURCES[name])
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(f"unknown dataset builder {name!r}; available: {dataset_builders()}")
    return builder


def dataset_splits(name: str) -> list[str]:
    """The splits the builder ``name`` accepts (``["train", "eval"]`` unless it declares others)."""
    return list(getattr(_builder_named(name), "splits", ("train", "eval")))


def is_fixed_dataset(name: str) -> bool:
    """Whether the builder ``name`` draws from a fixed set of items (``n=0``: all of them)."""
    return bool(getattr(_builder_named(name), "fixed_dataset", False))


def build_dataset(name: str, n: int, seed: int, split: str = "train", **options: Any) -> list[RawRow]:
    """Build ``n`` raw rows with the builder ``name``; ``options`` are that builder's keyword options.

    ``split`` ("train" or "eval"; the ``sql`` builder also has "heldout") reaches builders that take it
    (fixed datasets with a held-out part); generated ones tell the splits apart by ``seed`` instead.
    ``n=0`` asks a fixed dataset's builder for every row.
    """
    builder = _builder_named(name)
    whole = getattr(builder, "fixed_dataset", False)  # fixed datasets take n=0: every row
    if isinstance(n, bool) or not isinstance(n, int) or n < (0 if whole else 1):
        kind = "an integer >= 0 (0: every row)" if whole else "a positive integer"
        raise ValueError(f"dataset builder {name!r}: n must be {kind}, got {n!r}")
    splits = getattr(builder, "splits", ("train", "eval"))
    if split not in splits:
        raise ValueError(f"dataset builder {name!r}: split must be one of {list(splits)}, got {split!r}")
    parameters = inspect.signature(builder).parameters
    accepted = [parameter for parameter in parameters if parameter not in ("n", "seed", "split")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"dataset builder {name!r}: unknown options {unknown}; accepted: {accepted}")
    if "split" in parameters:
        options["split"] = split
    return builder(n=n, seed=seed, **options)


@_builder("arithmetic")
def _arithmetic(n: int, seed: int, low: int = 1, high: int = 9) -> list[RawRow]:
    """'Add a and b.' with a and b uniform in [low, high]; the model must end with 'The answer is N.'"""
    if not (isinstance(low, int) and isinstance(high, int) and low <= high):
        raise ValueError(
            f"dataset builder 'arithmetic': need integers low <= high, got low={low!r}, high={high!r}"
        )
    rng = random.Random(seed)
    rows = []
    for index in range(n):
        a, b = rng.randint(low, high), rng.randint(low, high)
        question = f"Add {a} and {b}."
        answer = str(a + b)
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    # "N" stays a literal letter: the model is shown the pattern, not the answer.
                    {"role": "user", "content": f"{question} End your reply with: The answer is N."},
                ],
                "env_class": "arithmetic",
                "reward_spec": {"method": "rule", "ground_truth": answer},
                "extra_info": {"index": index},
                "question": question,
                "answer": answer,
            }
        )
    return rows


@_builder("reasoning_gym")
def _reasoning_gym(
    n: int, seed: int, dataset: str = "basic_arithmetic", config: dict[str, Any] | None = None
) -> list[RawRow]:
    """Rows from ``reasoning_gym.create_dataset(dataset, size=n, seed=seed, **config)``.

    Every answer must be a number (the ``arithmetic`` env grades numbers); a generator with another
    kind of answer is refused with the first offending item.
    """
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(
            "dataset builder 'reasoning_gym' needs the reasoning-gym package: pip install reasoning-gym"
        ) from None
    try:
        items = reasoning_gym.create_dataset(dataset, size=n, seed=seed, **(config or {}))
    except ValueError as error:
        if "not registered" not in str(error):
            raise
        from reasoning_gym.factory import DATASETS

        raise ValueError(
            f"dataset builder 'reasoning_gym': reasoning-gym has no dataset {dataset!r}; "
            f"available: {sorted(DATASETS)}"
        ) from None

    rows = []
    for index, item in enumerate(items):
        answer = str(item["answer"]).strip()
        if not _NUMBER.fullmatch(answer):
            raise ValueError(
                f"dataset builder 'reasoning_gym': {dataset!r} item {index} has the non-numeric answer {answer!r}; "
                "the arithmetic env grades numbers only, so pick a numeric dataset (basic_arithmetic, chain_sum, "
                "gsm_symbolic, ...)"
            )
        question = item["question"]
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"{question}\n{BOXED_INSTRUCTION}"},
                ],
                "env_class": "arithmetic",
                "reward_spec": {"method": "rule", "ground_truth": answer},
                # Only flat, uniformly-typed metadata: reasoning-gym's per-item metadata varies in
                # shape between items, which a parquet column cannot hold.
                "extra_info": {"index": index, "source_dataset": dataset},
                "question": question,
                "answer": answer,
                # The prompt asks for \boxed{}: tell the arithmetic env to grade that format.
                "answer_format": "boxed",
            }
        )
    return rows
