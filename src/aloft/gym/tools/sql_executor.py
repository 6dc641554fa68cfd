"""Read-only SQLite for model-written queries: ``SqlExecutor``, the connection and its guards.

What a query can and cannot do, each guarantee tested by a real attempt in
``tests/gym/test_sql_tool.py`` (the database file's SHA-256 never changes):

1. **The file is opened read-only.** The connection is opened through the URI
   ``file:/abs/path?mode=ro``: SQLite opens the file ``O_RDONLY``, so no statement can write it,
   whatever the authorizer says. ``immutable=True`` adds ``&immutable=1``: SQLite then skips file
   locking and change detection, which is faster and works on read-only media, but is only right
   for a file *nothing* writes while it is open (a built dataset database); a database another
   process updates must not be opened immutable (stale or corrupt reads). The default is False.
2. **An authorizer allows reads only.** ``SELECT``, reading columns, calling functions and
   recursive CTEs are allowed; every other action is denied before the statement runs: INSERT,
   UPDATE, DELETE, CREATE/DROP/ALTER of anything (temporary objects included), ATTACH/DETACH (and
   so ``VACUUM``/``VACUUM INTO``, which attach), transactions and savepoints, ANALYZE, REINDEX,
   and every PRAGMA except the schema-reading ones in ``READ_ONLY_PRAGMAS`` (``PRAGMA
   table_info(Album)`` works; ``PRAGMA journal_mode=WAL`` or ``PRAGMA writable_schema=1`` do not).
   The functions ``load_extension`` and ``fts3_tokenizer`` are denied, and extension loading is
   switched off on the connection where Python exposes the switch.
3. **One statement per call, starting with SELECT, WITH, VALUES, EXPLAIN or PRAGMA** (comments
   before it are fine); anything else is refused before SQLite sees it.
4. **Time and size limits.** A progress handler aborts a query after ``timeout_s`` seconds (or
   ``max_steps`` virtual-machine steps), fetching included, so a runaway recursive CTE returns an
   error within about ``timeout_s``. Strings and blobs are capped at ``MAX_VALUE_BYTES`` (e.g.
   ``zeroblob(2e9)`` fails instead of allocating 2 GB), statements at ``MAX_SQL_CHARS``, and only
   ``max_rows`` rows are kept; the rest are counted (up to ``COUNT_LIMIT``) for the
   "(k more rows)" note.

Errors (syntax errors, denied actions, time limits) come back in ``SqlResult.error`` as one
readable line; ``execute`` never raises for anything a query does. Results are ``SqlResult``
(``aloft.gym.tools.sql_result``, which renders them as text tables); the tools a model calls are
``SqlTools`` (``aloft.gym.tools.sql``).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Literal

from aloft.gym.tools.sql_result import SqlResult

__all__ = [
    "COUNT_LIMIT",
    "MAX_SQL_CHARS",
    "MAX_VALUE_BYTES",
    "READ_ONLY_PRAGMAS",
    "SqlExecutor",
]

READ_ONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
    }
)
"""PRAGMAs a query may run: they read the schema and take a table or index name, never a setting."""

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
MAX_VALUE_BYTES = 10_000_000
"""Longest string or blob a query may build (SQLITE_LIMIT_LENGTH)."""
MAX_SQL_CHARS = 100_000
"""Longest statement accepted (SQLITE_LIMIT_SQL_LENGTH)."""
COUNT_LIMIT = 10_000
"""Rows beyond ``max_rows`` are counted up to this many for the "(k more rows)" note."""
PROGRESS_INTERVAL = 1_000
"""Virtual-machine instructions between two checks of the time limit."""

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW "
        "CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE "
        "DROP_TEMP_TRIGGER DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA READ SELECT TRANSACTION UPDATE "
        "ATTACH DETACH ALTER_TABLE REINDEX ANALYZE CREATE_VTABLE DROP_VTABLE FUNCTION SAVEPOINT RECURSIVE"
    ).split()
    if hasattr(sqlite3, f"SQLITE_{name}")
}
"""Authorizer action code -> readable name, for error messages."""
_STATEMENT_START = re.compile(r"(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?(?:\*/|\Z))*", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z]+")
_ALLOWED_FIRST_WORDS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"})
_READ_ONLY_HINT = "the database is read-only; only SELECT queries are allowed"


class _Interrupt:
    """The progress handler's state: a deadline and a step budget for the running query."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.steps_left: int | None = None
        self.reason: str | None = None

    def arm(self, timeout_s: float, max_steps: int | None) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.steps_left = max_steps
        self.reason = None

    def disarm(self) -> None:
        self.deadline = float("inf")
        self.steps_left = None

    def __call__(self) -> int:
        if self.steps_left is not None:
            self.steps_left -= PROGRESS_INTERVAL
            if self.steps_left < 0:
                self.reason = "steps"
                return 1
        if time.monotonic() > self.deadline:
            self.reason = "time"
            return 1
        return 0


class SqlExecutor:
    """Runs model-written queries on one SQLite file, read-only (see the module docstring).

    ``execute`` is thread-safe (one query at a time per executor). The connection is opened on the
    first query and reopened after ``close``. Raises ``FileNotFoundError`` at construction if
    ``db_path`` is not a file.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        timeout_s: float = 5.0,
        max_rows: int | None = 50,
        max_cell_chars: int = 100,
        max_steps: int | None = None,
        immutable: bool = False,
        table_format: str = "github",
    ) -> None:
        path = Path(db_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"SQLite database {str(path)!r} does not exist (or is not a file)")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ValueError(f"SqlExecutor: timeout_s must be a number > 0, got {timeout_s!r}")
        if max_rows is not None and (
            isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0
        ):
            raise ValueError(f"SqlExecutor: max_rows must be an integer >= 0 or None, got {max_rows!r}")
        if isinstance(max_cell_chars, bool) or not isinstance(max_cell_chars, int) or max_cell_chars < 4:
            raise ValueError(f"SqlExecutor: max_cell_chars must be an integer >= 4, got {max_cell_chars!r}")
        if max_steps is not None and (
            isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        ):
            raise ValueError(f"SqlExecutor: max_steps must be an integer >= 1 or None, got {max_steps!r}")
        self.db_path = path.resolve()
        self.timeout_s = float(timeout_s)
        self.max_rows = max_rows
        self.max_cell_chars = max_cell_chars
        self.max_steps = max_steps
        self.immutable = immutable
        self.table_format = table_format
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._interrupt = _Interrupt()
        self._denied: list[str] = []

    # ---- connection ------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        uri = self.db_path.as_uri() + "?mode=ro" + ("&immutable=1" if self.immutable else "")
        # isolation_level=None: the sqlite3 module never issues BEGIN on its own.
        connection = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            if hasattr(connection, "enable_load_extension"):  # absent when Python was built without it
                connection.enable_load_extension(False)
            connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            connection.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS)
            connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            connection.set_authorizer(self._authorize)
            connection.set_progress_handler(self._interrupt, PROGRESS_INTERVAL)
            # Bytes that are not UTF-8 (possible in any SQLite file) must not raise while fetching.
            connection.text_factory = lambda data: data.decode("utf-8", errors="replace")
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def close(self) -> None:
        """Close the connection (idempotent; a later ``execute`` opens a new one)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> SqlExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, db_name: str | None, source: str | None
    ) -> int:
        if action in _ALLOWED_ACTIONS:
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
                self._denied.append(f"the function {arg2}()")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_ONLY_PRAGMAS:
            return sqlite3.SQLITE_OK
        self._denied.append(_describe_denial(action, arg1, arg2))
        return sqlite3.SQLITE_DENY

    # ---- queries ---------------------------------------------------------------------------------
    def execute(self, query: str, *, max_rows: int | None | Literal["default"] = "default") -> SqlResult:
        """Run one read-only statement and return its result or its error (never raises for the query).

        ``max_rows`` overrides the executor's row cap for this call (``None``: keep every row, still
        within the time limit).
        """
        limit = self.max_rows if max_rows == "default" else max_rows
        start = time.perf_counter()
        refusal = _check_statement(query)
        if refusal is not None:
            return self._result(start, error=refusal)
        with self._lock:
            connection = self._connect()
            self._denied = []
            self._interrupt.arm(self.timeout_s, self.max_steps)
            try:
                cursor = connection.execute(query)
                columns = [description[0] for description in cursor.description or ()]
                rows = cursor.fetchall() if limit is None else cursor.fetchmany(limit) if limit > 0 else []
                omitted, exact = 0, True
                if limit is not None:
                    omitted, exact = self._count_rest(cursor)
                cursor.close()
            except (sqlite3.Error, OverflowError, MemoryError) as error:
                return self._result(start, error=self._explain(error))
            finally:
                self._interrupt.disarm()
        return self._result(
            start,
            columns=columns,
            rows=rows,
            truncated=omitted > 0 or not exact,
            omitted=omitted,
            exact=exact,
        )

    def _count_rest(self, cursor: sqlite3.Cursor) -> tuple[int, bool]:
        """Count the rows left in ``cursor`` without keeping them, up to ``COUNT_LIMIT``."""
        counted = 0
        try:
            while counted < COUNT_LIMIT:
                batch = cursor.fetchmany(min(500, COUNT_LIMIT - counted))
                if not batch:
                    return counted, True
                counted += len(batch)
            return counted, cursor.fetchone() is None
        except sqlite3.OperationalError:
            # The time limit hit while counting rows nobody will see: the rows kept are still valid.
            return counted, False

    def _explain(self, error: BaseException) -> str:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if self._interrupt.reason == "time":
            return (
                f"the query was stopped after the time limit of {self.timeout_s:g} s; "
                "simplify it or add a LIMIT"
            )
        if self._interrupt.reason == "steps":
            return f"the query was stopped after {self.max_steps} steps (the step limit); simplify it"
        if self._denied:
            return f"not allowed: {self._denied[0]}; {_READ_ONLY_HINT}"
        if "one statement at a time" in message:
            return "only one SQL statement per query is allowed"
        if isinstance(error, MemoryError):
            return "the query needs too much memory"
        if "readonly" in message or "read-only" in message:
            return f"{message}; {_READ_ONLY_HINT}"
        return message

    def _result(
        self,
        start: float,
        *,
        error: str | None = None,
        columns: list[str] | None = None,
        rows: list[tuple[Any, ...]] | None = None,
        truncated: bool = False,
        omitted: int = 0,
        exact: bool = True,
    ) -> SqlResult:
        return SqlResult(
            columns=columns or [],
            rows=rows or [],
            error=error,
            truncated=truncated,
            omitted_rows=omitted,
            omitted_exact=exact,
            elapsed_s=time.perf_counter() - start,
            render_options={"max_cell_chars": self.max_cell_chars, "table_format": self.table_format},
        )

    def render(self, result: SqlResult) -> str:
        """``result`` as text with this executor's cell and table settings (see ``SqlResult.render``)."""
        return result.render(max_cell_chars=self.max_cell_chars, table_format=self.table_format)

    def run(self, query: str) -> str:
        """``execute`` then ``render``: the text a model sees for ``query``."""
        return self.render(self.execute(query))

    # ---- schema ----------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        """Names of the tables and views, sorted (SQLite's internal ``sqlite_*`` tables left out)."""
        result = self.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
            max_rows=None,
        )
        if result.error is not None:
            raise sqlite3.DatabaseError(f"cannot list the tables of {str(self.db_path)!r}: {result.error}")
        return [row[0] for row in result.rows]

    def schema(self) -> str:
        """The ``CREATE`` statements of the tables and views, in name order, separated by blank lines."""
        result = self.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
            max_rows=None,
        )
        if result.error is not None:
            raise sqlite3.DatabaseError(f"cannot read the schema of {str(self.db_path)!r}: {result.error}")
        return "\n\n".join(row[0].strip() + ";" for row in result.rows)


def _check_statement(query: object) -> str | None:
    """Why ``query`` is refused before it reaches SQLite, or None."""
    if not isinstance(query, str):
        return f"the query must be a string, got {type(query).__name__}"
    if "\x00" in query:
        return "the query contains a NUL character"
    if len(query) > MAX_SQL_CHARS:
        return f"the query is {len(query)} characters long; the limit is {MAX_SQL_CHARS}"
    body = query[_STATEMENT_START.match(query).end() :]  # type: ignore[union-attr]
    if not body.strip().strip(";").strip():
        return "the query is empty"
    word = _FIRST_WORD.match(body)
    first = word.group(0).upper() if word else body.split(None, 1)[0][:20]
    if first not in _ALLOWED_FIRST_WORDS:
        return f"{first} statements are not allowed; {_READ_ONLY_HINT}"
    return None


def _describe_denial(action: int, arg1: str | None, arg2: str | None) -> str:
    name = _ACTION_NAMES.get(action, f"action {action}")
    if action == sqlite3.SQLITE_PRAGMA:
        setting = f" = {arg2}" if arg2 is not None else ""
        return f"PRAGMA {arg1}{setting} (allowed: {', '.join(sorted(READ_ONLY_PRAGMAS))})"
    if action == sqlite3.SQLITE_ATTACH:
        return "ATTACH (also used by VACUUM)" if not arg1 else f"ATTACH of {arg1!r} (also used by VACUUM)"
    if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in ("sqlite_master", "sqlite_schema"):
        return (
            "writing the schema table (table-valued pragma functions such as pragma_table_info() are "
            "not available; use PRAGMA table_info(name) or SELECT sql FROM sqlite_master)"
        )
    target = f" on {arg1!r}" if arg1 else ""
    return f"{name}{target}"
