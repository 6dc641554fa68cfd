"""The read-only SQLite executor and the ``sql`` tool group, each guarantee tested by a real attempt.

Every test runs against a real SQLite file; an autouse fixture checks after each test that the
file's SHA-256 did not change and that no journal / WAL file appeared next to it.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from aloft.gym.tools.sql import SqlExecutor, SqlTools

ROWS = 500


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path):
    """A real database file (in a directory whose name needs URI escaping), checked after the test."""
    directory = tmp_path / "dir with space?#%"
    directory.mkdir()
    path = directory / "store.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(
        """
        CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, note TEXT);
        CREATE INDEX items_name ON items (name);
        CREATE TABLE tags (item_id INTEGER REFERENCES items (id), tag TEXT);
        """
    )
    connection.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?)",
        [
            (i, f"item {i:03d}", round(i * 1.1, 2), None if i % 7 else "line one\nline two")
            for i in range(1, ROWS + 1)
        ],
    )
    connection.executemany(
        "INSERT INTO tags VALUES (?, ?)", [(i, "even" if i % 2 == 0 else "odd") for i in range(1, 21)]
    )
    connection.commit()
    connection.close()
    before = _sha256(path)
    yield path
    assert _sha256(path) == before, "the database file changed"
    assert sorted(p.name for p in directory.iterdir()) == ["store.sqlite"], "a journal or WAL file appeared"


@pytest.fixture
def executor(db: Path):
    with SqlExecutor(db, timeout_s=1.0, max_rows=10) as sql:
        yield sql


def _count(db: Path) -> int:
    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT count(*) FROM items").fetchone()[0]
    finally:
        connection.close()


def test_select_returns_rows_and_renders_a_readable_table(executor: SqlExecutor):
    result = executor.execute("SELECT id, name, price, note FROM items WHERE id IN (6, 7) ORDER BY id")
    assert result.ok and not result.truncated
    assert result.columns == ["id", "name", "price", "note"]
    assert result.rows == [(6, "item 006", 6.6, None), (7, "item 007", 7.7, "line one\nline two")]
    text = result.render()
    lines = text.splitlines()
    assert len(lines) == 4  # header, rule, two rows: a newline inside a value stays on its row
    assert "item 006" in lines[2] and "NULL" in lines[2]
    assert "line one\\nline two" in lines[3]
    assert executor.run("SELECT 0.1 + 0.2 AS x").splitlines()[-1].strip("| ") == "0.3"


def test_empty_result_and_long_cells(db: Path):
    with SqlExecutor(db, max_cell_chars=10) as sql:
        assert sql.run("SELECT name FROM items WHERE id < 0").endswith("(no rows)")
        text = sql.run("SELECT 'abcdefghijklmnopqrstuvwxyz' AS letters")
        assert "abcdefg..." in text and "xyz" not in text


def test_a_huge_result_is_truncated_with_a_count_of_the_rest(executor: SqlExecutor):
    result = executor.execute("SELECT * FROM items")
    assert len(result.rows) == 10 and result.truncated
    assert (result.omitted_rows, result.omitted_exact) == (ROWS - 10, True)
    assert result.render().endswith(f"({ROWS - 10} more rows; showing the first 10)")
    # Millions of rows: ten are kept, the rest counted only up to a bound, in well under the time limit.
    start = time.perf_counter()
    huge = executor.execute("SELECT a.id, b.id FROM items a, items b, items c")
    assert len(huge.rows) == 10 and huge.truncated and not huge.omitted_exact
    assert "at least" in huge.render()
    assert time.perf_counter() - start < 1.0


def test_max_rows_none_keeps_everything(executor: SqlExecutor):
    result = executor.execute("SELECT id FROM items", max_rows=None)
    assert len(result.rows) == ROWS and not result.truncated


# Statements refused before SQLite sees them (they do not start with SELECT/WITH/VALUES/EXPLAIN/PRAGMA).
REFUSED = [
    "DROP TABLE items",
    "DELETE FROM items",
    "INSERT INTO items (name) VALUES ('x')",
    "UPDATE items SET price = 0",
    "CREATE TABLE evil (x)",
    "CREATE TEMP TABLE evil (x)",
    "ALTER TABLE items ADD COLUMN evil TEXT",
    "REPLACE INTO items VALUES (1, 'x', 0, NULL)",
    "ATTACH DATABASE '{other}' AS other",
    "DETACH DATABASE main",
    "VACUUM",
    "VACUUM INTO '{other}'",
    "REINDEX",
    "ANALYZE",
    "BEGIN IMMEDIATE",
    "/* a comment first */ DROP TABLE items",
]


@pytest.mark.parametrize("statement", REFUSED)
def test_write_statements_are_refused(executor: SqlExecutor, db: Path, tmp_path: Path, statement: str):
    other = tmp_path / "other.sqlite"
    result = executor.execute(statement.format(other=other))
    assert result.error is not None and "not allowed" in result.error
    assert result.render().startswith("Error: ")
    assert not other.exists()
    assert _count(db) == ROWS


# Statements that pass the first-word check and are denied by the authorizer while being compiled.
DENIED = [
    ("WITH x AS (SELECT 1) INSERT INTO items (name) SELECT 'evil' FROM x", "INSERT"),
    ("WITH x AS (SELECT 1) DELETE FROM items WHERE id IN (SELECT * FROM x)", "DELETE"),
    ("WITH x AS (SELECT 1) UPDATE items SET price = 0 WHERE id IN (SELECT * FROM x)", "UPDATE"),
    ("PRAGMA journal_mode = WAL", "journal_mode"),
    ("PRAGMA writable_schema = 1", "writable_schema"),
    ("PRAGMA user_version = 7", "user_version"),
    ("PRAGMA main.locking_mode = EXCLUSIVE", "locking_mode"),
    ("SELECT load_extension('/tmp/evil.so')", "load_extension"),
    ("SELECT * FROM pragma_table_info('items')", "pragma_table_info"),
]


@pytest.mark.parametrize(("statement", "named"), DENIED)
def test_the_authorizer_denies_writes_pragmas_and_extensions(
    executor: SqlExecutor, db: Path, statement, named
):
    result = executor.execute(statement)
    assert result.error is not None and result.error.startswith("not allowed:"), result.error
    assert named in result.error
    assert _count(db) == ROWS
    assert executor.execute("SELECT count(*) FROM items").rows == [(ROWS,)]  # still usable afterwards


def test_read_only_pragmas_and_the_schema_table_are_allowed(executor: SqlExecutor):
    assert [row[1] for row in executor.execute("PRAGMA table_info(items)").rows] == [
        "id",
        "name",
        "price",
        "note",
    ]
    assert executor.execute("PRAGMA index_list(items)").rows[0][1] == "items_name"
    assert executor.tables() == ["items", "tags"]
    assert executor.schema().startswith("CREATE TABLE items")


def test_the_file_itself_is_opened_read_only(executor: SqlExecutor, db: Path):
    """Layer 1 alone: with the authorizer removed from the executor's connection, SQLite still
    cannot write, because the file was opened with mode=ro."""
    connection = executor._connect()
    connection.set_authorizer(None)
    for statement in ("DELETE FROM items", "CREATE TABLE evil (x)", "PRAGMA user_version = 7"):
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            connection.execute(statement)
    connection.execute("PRAGMA writable_schema = 1")  # a connection setting, no write ...
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        connection.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE items (x)' WHERE name = 'items'")
    assert _count(db) == ROWS


def test_a_runaway_recursive_cte_stops_at_the_time_limit(db: Path):
    with SqlExecutor(db, timeout_s=0.3) as sql:
        start = time.perf_counter()
        result = sql.execute(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"
        )
        elapsed = time.perf_counter() - start
        assert result.error is not None and "time limit of 0.3 s" in result.error
        assert elapsed < 1.5
        # A cross join of 6e10 rows is stopped the same way, and the executor keeps working.
        assert "time limit" in sql.execute("SELECT count(*) FROM items a, items b, items c, items d").error
        assert sql.execute("SELECT count(*) FROM items").rows == [(ROWS,)]


def test_the_step_limit(db: Path):
    with SqlExecutor(db, timeout_s=10, max_steps=20_000) as sql:
        assert "step limit" in sql.execute("SELECT count(*) FROM items a, items b").error
        assert sql.execute("SELECT count(*) FROM tags").rows == [(20,)]


def test_huge_values_and_bad_queries_give_one_line_errors(executor: SqlExecutor):
    assert "too big" in executor.execute("SELECT zeroblob(2000000000)").error
    assert "too big" in executor.execute("SELECT length(hex(zeroblob(6000000)))").error
    assert executor.execute("SELECT 1; SELECT 2").error == "only one SQL statement per query is allowed"
    assert "syntax error" in executor.execute("SELECT FROM WHERE").error
    assert "no such table" in executor.execute("SELECT * FROM nope").error
    assert executor.execute("   ").error == "the query is empty"
    assert executor.execute("-- only a comment").error == "the query is empty"
    assert "NUL" in executor.execute("SELECT 1\x00; DROP TABLE items").error
    assert "must be a string" in executor.execute(None).error  # type: ignore[arg-type]
    for error in (executor.execute(q).error for q in ("SELECT FROM WHERE", "SELECT 1; SELECT 2")):
        assert "\n" not in error


def test_concurrent_queries_from_threads(executor: SqlExecutor):
    results: list[object] = []

    def work(i: int) -> None:
        results.append(executor.execute(f"SELECT count(*) FROM items WHERE id <= {i * 10}").rows)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == sorted([[(i * 10,)] for i in range(1, 9)])


def test_immutable_mode_reads_the_same(db: Path):
    with SqlExecutor(db, immutable=True) as sql:
        assert sql.execute("SELECT sum(id) FROM items").rows == [(ROWS * (ROWS + 1) // 2,)]
        assert "not allowed" in sql.execute("WITH x AS (SELECT 1) DELETE FROM items").error


def test_constructor_errors(tmp_path: Path, db: Path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SqlExecutor(tmp_path / "missing.sqlite")
    with pytest.raises(ValueError, match="timeout_s"):
        SqlExecutor(db, timeout_s=0)
    with pytest.raises(ValueError, match="max_rows"):
        SqlExecutor(db, max_rows=-1)


def test_close_is_idempotent_and_reopens_on_demand(executor: SqlExecutor):
    executor.close()
    executor.close()
    assert executor.execute("SELECT 1").rows == [(1,)]


def test_tool_group_calls_never_raise_and_count_errors(db: Path):
    with SqlTools(db, max_rows=3) as tools:
        assert tools.tool_names() == ["execute_sql", "list_tables", "describe_table"]
        ok = tools.call("execute_sql", {"query": "SELECT id FROM items ORDER BY id"})
        assert ok.ok and ok.output.splitlines()[2].strip("| ") == "1"
        assert ok.output.endswith(f"({ROWS - 3} more rows; showing the first 3)")
        denied = tools.call("execute_sql", {"query": "DROP TABLE items"})
        assert not denied.ok and denied.error == "exception"
        assert denied.output.startswith("Error: DROP statements are not allowed")
        bad = tools.call("execute_sql", {"sql": "SELECT 1"})
        assert not bad.ok and bad.error == "bad_arguments"
        assert tools.call("list_tables").output == "items\ntags"
        assert tools.call("describe_table", {"table": "TAGS"}).output.startswith("CREATE TABLE tags")
        missing = tools.call("describe_table", {"table": "nope"})
        assert not missing.ok and "no table named 'nope'" in missing.output
        metrics = tools.metrics()
        assert metrics["tool_calls"] == 6 and metrics["tool_errors"] == 3
        schema = tools.schemas()[0]["function"]
        assert schema["name"] == "execute_sql" and schema["parameters"]["required"] == ["query"]
    tools.close()
    assert tools.closed
