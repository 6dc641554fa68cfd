"""Question / gold-SQL pairs: the hand-written ones of ``data/sql_pairs.json`` and the instances of
``templates.TEMPLATES``, each checked by execution, given a Spider-style difficulty and a split.

A pair is ``{"id", "db", "question", "sql", "difficulty", "split", "source"}`` (hand-written pairs
also keep their ``category``).

- **Difficulty** (``difficulty(sql)``, from the query as Spider defines its tiers): ``"hard"`` when it
  nests a query, has HAVING or joins three or more tables; ``"medium"`` when it joins two tables or
  groups; ``"easy"`` otherwise (one table, filters, aggregates, order).
- **Split**: every pair of a held-out database (``catalog.HELDOUT_DATABASES``) is ``"heldout"``, so
  evaluation on them measures databases the policy never saw. The pairs of the other databases are
  ``"train"``, or ``"eval"`` (in-domain) for one in ``EVAL_FRACTION_DENOMINATOR`` by a stable hash:
  of the pair id for hand-written pairs, of the template key for template instances (so an in-domain
  eval question is never a training question with another value in it).
- **Checked by execution** (template instances while they are drawn; hand-written pairs in the
  tests): the gold query runs, returns at least one row, and returns the same rows when SQLite scans
  tables in reverse (``PRAGMA reverse_unordered_selects``), so its answer does not hang on ties or
  scan order. Duplicates (same question, or same query up to whitespace) are dropped.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from aloft.data.builders import stable_hash
from aloft.data.sources.sql.catalog import DATABASES, HELDOUT_DATABASES, database_path
from aloft.data.sources.sql.templates import TEMPLATES, PairTemplate
from aloft.gym.envs.text2sql import has_top_level_order_by, results_match, without_literals

__all__ = [
    "CATEGORIES",
    "DIFFICULTIES",
    "EVAL_FRACTION_DENOMINATOR",
    "SPLITS",
    "difficulty",
    "load_pairs",
    "pairs",
    "split_of",
    "sql_literal",
    "template_pairs",
]

PAIRS_FILE = Path(__file__).resolve().parent / "data" / "sql_pairs.json"
CATEGORIES = ("filter", "aggregate", "group_by", "join", "nested", "order_limit")
"""Kinds of the hand-written pairs: single-table filters, single-table aggregates, GROUP BY / HAVING,
joins, nested subqueries, ORDER BY / LIMIT."""
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "eval", "heldout")
EVAL_FRACTION_DENOMINATOR = 5
"""One pair (or template) in this many of a training database goes to the in-domain eval split."""


def difficulty(sql: str) -> str:
    """The Spider-style tier of a query: ``"easy"``, ``"medium"`` or ``"hard"`` (module docstring)."""
    text = without_literals(sql).lower()
    selects = len(re.findall(r"\bselect\b", text))
    joins = len(re.findall(r"\bjoin\b", text)) + _comma_joins(text)
    if selects > 1 or re.search(r"\bhaving\b", text) or joins >= 2:
        return "hard"
    if joins == 1 or re.search(r"\bgroup\s+by\b", text):
        return "medium"
    return "easy"


def _comma_joins(text: str) -> int:
    """Tables joined by commas in a FROM clause (``FROM a, b``) count as joins."""
    count = 0
    for clause in re.findall(
        r"\bfrom\b(.*?)(?:\bwhere\b|\bgroup\b|\border\b|\blimit\b|\)|$)", text, re.DOTALL
    ):
        count += clause.count(",")
    return count


def split_of(key: str, db_id: str | None = None) -> str:
    """``"heldout"`` for a held-out database; else ``"eval"`` for one ``key`` (a hand-written pair id or a
    template key) in ``EVAL_FRACTION_DENOMINATOR`` by a stable hash, ``"train"`` for the rest."""
    if db_id in HELDOUT_DATABASES:
        return "heldout"
    return "eval" if stable_hash(key) % EVAL_FRACTION_DENOMINATOR == 0 else "train"


def sql_literal(value: Any) -> str:
    """``value`` as an SQLite literal: strings quoted (``'`` doubled), numbers as they are, None as NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return str(int(value))
    return repr(value)


# ---- hand-written pairs -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _hand_written() -> tuple[dict[str, Any], ...]:
    items = json.loads(PAIRS_FILE.read_text(encoding="utf-8"))
    for position, item in enumerate(items):
        missing = {"id", "db", "category", "question", "sql"} - set(item)
        if missing:
            raise ValueError(f"{PAIRS_FILE.name} item {position}: missing fields {sorted(missing)}")
        if item["db"] not in DATABASES or item["category"] not in CATEGORIES:
            raise ValueError(f"{PAIRS_FILE.name} item {item['id']!r}: unknown db or category")
    return tuple(
        {
            **item,
            "difficulty": difficulty(item["sql"]),
            "split": split_of(item["id"], item["db"]),
            "source": "hand-written",
        }
        for item in items
    )


def load_pairs() -> list[dict[str, Any]]:
    """The hand-written pairs (``data/sql_pairs.json``), with their difficulty and split."""
    return [dict(item) for item in _hand_written()]


# ---- template instances -------------------------------------------------------------------------
def _rows(connection: sqlite3.Connection, sql: str, reverse: bool) -> list[tuple[Any, ...]] | None:
    connection.execute(f"PRAGMA reverse_unordered_selects = {int(reverse)}")
    try:
        return connection.execute(sql).fetchall()
    except sqlite3.Error:
        return None


def _stable(connection: sqlite3.Connection, sql: str) -> bool:
    """Whether ``sql`` runs, returns rows, and returns the same rows whatever the scan order."""
    forward = _rows(connection, sql, reverse=False)
    if not forward:
        return False
    backward = _rows(connection, sql, reverse=True)
    if backward is None:
        return False
    return results_match(backward, forward, has_top_level_order_by(sql))


def _instances(template: PairTemplate, db_id: str, connection: sqlite3.Connection) -> list[dict[str, Any]]:
    if template.slots is None:
        candidates: list[dict[str, Any]] = [{}]
    else:
        cursor = connection.execute(template.slots)
        names = [column[0] for column in cursor.description]
        candidates = [dict(zip(names, row)) for row in cursor.fetchall()]
        candidates.sort(key=repr)  # the slot query's own order may change with the scan order
        random.Random(stable_hash(template.key)).shuffle(candidates)
    chosen = []
    for values in candidates:
        if len(chosen) == template.count:
            break
        if any(value is None for value in values.values()):
            continue
        sql = template.sql.format(**{name: sql_literal(value) for name, value in values.items()})
        if not _stable(connection, sql):
            continue
        chosen.append(
            {
                "id": f"{template.key}.{len(chosen) + 1}",
                "db": db_id,
                "question": template.question.format(**values),
                "sql": sql,
                "difficulty": difficulty(sql),
                "split": split_of(template.key, db_id),
                "source": "template",
                "template": template.key,
            }
        )
    return chosen


@lru_cache(maxsize=32)
def _template_pairs_cached(db_id: str, db_dir: str | None) -> tuple[dict[str, Any], ...]:
    path = database_path(db_id, db_dir)
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return tuple(
            item for template in TEMPLATES.get(db_id, []) for item in _instances(template, db_id, connection)
        )
    finally:
        connection.close()


def template_pairs(db_id: str, db_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The checked instances of database ``db_id``'s templates (the database is built if needed)."""
    return [dict(item) for item in _template_pairs_cached(db_id, None if db_dir is None else str(db_dir))]


# ---- all pairs ------------------------------------------------------------------------------------
def pairs(
    db: str = "all", split: str | None = None, db_dir: str | Path | None = None
) -> list[dict[str, Any]]:
    """The pairs of database ``db`` (``"all"``: every database) in ``split`` (``"train"``, ``"eval"``,
    ``"heldout"`` or None: all), hand-written first, deduplicated by question and by query."""
    if db != "all" and db not in DATABASES:
        raise ValueError(f"unknown SQL database {db!r}; choose one of {sorted(DATABASES)} or 'all'")
    if split not in (None, *SPLITS):
        raise ValueError(f"split must be one of {list(SPLITS)} or None, got {split!r}")
    db_ids = sorted(DATABASES) if db == "all" else [db]
    if split == "heldout":
        db_ids = [db_id for db_id in db_ids if db_id in HELDOUT_DATABASES]
    elif split in ("train", "eval"):
        db_ids = [db_id for db_id in db_ids if db_id not in HELDOUT_DATABASES]
    found, questions, queries = [], set(), set()
    for db_id in db_ids:
        hand_written = [item for item in load_pairs() if item["db"] == db_id]
        for item in hand_written + template_pairs(db_id, db_dir):
            query = " ".join(item["sql"].split()).lower()
            if (db_id, item["question"]) in questions or (db_id, query) in queries:
                continue
            questions.add((db_id, item["question"]))
            queries.add((db_id, query))
            if split is None or item["split"] == split:
                found.append(item)
    return found
