"""Where the text-to-SQL databases live and how a database file is written: atomically, versioned,
read-only on disk.

Every database is built once into ``sql_cache_dir()/<db_id>.sqlite`` by ``build_database_file``.
Each file carries ``PRAGMA user_version = BUILD_VERSION``; a cached file from another version is
rebuilt. Files are built under a temporary name and renamed into place, so concurrent builders never
expose a half-written file.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["BUILD_VERSION", "build_database_file", "schema_text", "sql_cache_dir", "write_database"]

BUILD_VERSION = 1
"""Stored as the databases' ``user_version``; bump it when a database's content changes."""


def sql_cache_dir() -> Path:
    """``$ALOFT_CACHE_DIR/data/sql`` (default ``~/.cache/aloft/data/sql``): where databases are built.

    The ``text2sql`` env resolves a row's ``db_id`` against the same directory by default.
    """
    root = Path(os.environ.get("ALOFT_CACHE_DIR") or Path.home() / ".cache" / "aloft").expanduser()
    return root / "data" / "sql"


def build_database_file(db_id: str, builder: Callable[[Path], None], db_dir: str | Path | None) -> Path:
    """``<db_dir>/<db_id>.sqlite``, written by ``builder(path)`` unless a current file is there."""
    directory = Path(db_dir).expanduser() if db_dir is not None else sql_cache_dir()
    target = directory / f"{db_id}.sqlite"
    if _current(target):
        return target
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".{db_id}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        builder(temporary)
        os.chmod(temporary, 0o444)  # read-only on disk too, as a further guard
        os.replace(temporary, target)  # atomic: readers see the old file or the whole new one
    finally:
        temporary.unlink(missing_ok=True)
    return target


def _current(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return connection.execute("PRAGMA user_version").fetchone()[0] == BUILD_VERSION
        finally:
            connection.close()
    except sqlite3.Error:
        return False


def write_database(path: Path, schema: str, tables: dict[str, list[tuple[Any, ...]]]) -> None:
    """Create ``path`` with ``schema`` and insert ``tables`` (name -> rows, in column order)."""
    if path.exists():
        path.unlink()
    connection = sqlite3.connect(path)
    try:
        connection.executescript(schema)
        with connection:
            for table, rows in tables.items():
                if rows:
                    marks = ", ".join("?" * len(rows[0]))
                    connection.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        connection.execute(f"PRAGMA user_version = {BUILD_VERSION}")
        connection.execute("ANALYZE")  # stable query plans from the first query on
        connection.commit()
    finally:
        connection.close()


def schema_text(path: str | Path) -> str:
    """The ``CREATE TABLE`` statements of a database, in creation order, for prompts."""
    connection = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        ).fetchall()
    finally:
        connection.close()
    return "\n\n".join(row[0].strip() + ";" for row in rows)
