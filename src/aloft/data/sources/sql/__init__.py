"""Text-to-SQL data in SkyRL-SQL's shape: ten real SQLite databases, question / gold-SQL pairs checked by
execution, and the ``sql`` dataset builder that turns them into rows for the ``text2sql`` env.

- ``catalog``: the databases (``DATABASES``; ``HELDOUT_DATABASES`` never appear in training) and
  ``database_path(db_id)``, which builds one into ``sql_cache_dir()`` on first use.
- ``pairs``: hand-written pairs and template instances, each with a Spider-style ``difficulty``
  (easy / medium / hard) and a ``split``: ``"train"``, ``"eval"`` (in-domain: the training databases,
  other questions) or ``"heldout"`` (the held-out databases).
- ``prompts``: the SkyRL-SQL prompt layout, multi-turn and 1-turn.

``build_dataset("sql", n, seed, split="train", db="all", max_turns=5)`` draws ``n`` pairs (``n=0``:
all of them, in a fixed order) as rows with SkyRL-SQL's fields (``data_source``, ``prompt``,
``env_class``, ``reward_spec``, ``db_id``, ``data``, ``extra_info``) plus ``db_path``, ``question``
and ``max_turns``. ``max_turns=1`` gives the 1-turn protocol (its own system prompt; a probe is bad
format); ``hint=True`` restates the reply format at the end of the user message (for small models). ``aloft data build sql --out DIR`` writes every split of both protocols.
"""

from __future__ import annotations

import random
from typing import Any

from aloft.data.builders import dataset_builder
from aloft.data.sources.sql.build import BUILD_VERSION, schema_text, sql_cache_dir
from aloft.data.sources.sql.catalog import DATABASES, HELDOUT_DATABASES, TRAIN_DATABASES, database_path
from aloft.data.sources.sql.chinook import (
    CHINOOK_FIXTURE_SHA256,
    build_chinook,
    chinook_fixture_from_sdist,
    load_chinook_fixture,
)
from aloft.data.sources.sql.pairs import (
    CATEGORIES,
    DIFFICULTIES,
    SPLITS,
    difficulty,
    load_pairs,
    pairs,
    split_of,
)
from aloft.data.sources.sql.prompts import (
    MULTI_TURN_SYSTEM_PROMPT,
    SINGLE_TURN_SYSTEM_PROMPT,
    format_hint,
    system_prompt,
    user_prompt,
)

__all__ = [
    "BUILD_VERSION",
    "CATEGORIES",
    "CHINOOK_FIXTURE_SHA256",
    "DATABASES",
    "DIFFICULTIES",
    "HELDOUT_DATABASES",
    "MULTI_TURN_SYSTEM_PROMPT",
    "SINGLE_TURN_SYSTEM_PROMPT",
    "SPLITS",
    "TRAIN_DATABASES",
    "build_chinook",
    "chinook_fixture_from_sdist",
    "database_path",
    "difficulty",
    "format_hint",
    "load_chinook_fixture",
    "load_pairs",
    "pairs",
    "rows_of",
    "schema_text",
    "split_of",
    "sql_cache_dir",
    "system_prompt",
    "user_prompt",
]


def rows_of(
    chosen: list[dict[str, Any]], split: str, max_turns: int = 5, hint: bool = False
) -> list[dict[str, Any]]:
    """Rows for the ``text2sql`` env from pairs (see the module docstring for the fields); ``hint``
    appends ``format_hint(max_turns)`` to each user message."""
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"dataset builder 'sql': max_turns must be an integer >= 1, got {max_turns!r}")
    paths = {db_id: database_path(db_id) for db_id in sorted({item["db"] for item in chosen})}
    schemas = {db_id: schema_text(path) for db_id, path in paths.items()}
    return [
        {
            "data_source": "aloft-sql",
            "prompt": [
                {"role": "system", "content": system_prompt(max_turns)},
                {
                    "role": "user",
                    "content": user_prompt(schemas[item["db"]], item["question"])
                    + (format_hint(max_turns) if hint else ""),
                },
            ],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": item["sql"]},
            "db_id": item["db"],
            "data": "aloft-sql",
            "extra_info": {
                "index": index,
                "split": split,
                "pair_id": item["id"],
                "difficulty": item["difficulty"],
            },
            "question": item["question"],
            "db_path": str(paths[item["db"]]),
            "max_turns": max_turns,
        }
        for index, item in enumerate(chosen)
    ]


@dataset_builder("sql", splits=SPLITS, fixed_dataset=True)
def _sql(
    n: int, seed: int, split: str = "train", db: str = "all", max_turns: int = 5, hint: bool = False
) -> list[dict[str, Any]]:
    """``n`` pairs of ``split`` for database ``db`` (or ``"all"``), drawn without replacement with
    ``seed`` (``n=0``: every pair, in their fixed order), as rows for the ``text2sql`` env with
    ``max_turns`` turns; ``hint`` adds the one-line format reminder (``prompts.format_hint``).
    Builds the databases into the cache if needed."""
    pool = pairs(db, split)
    if n > len(pool):
        raise ValueError(f"dataset builder 'sql': db {db!r} has {len(pool)} {split} pairs, asked for {n}")
    chosen = pool if n == 0 else random.Random(seed).sample(pool, n)
    return rows_of(chosen, split, max_turns, hint)
