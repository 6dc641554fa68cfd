"""The ``SqlTools`` tool group: ``execute_sql(query)``, ``list_tables()`` and ``describe_table(table)``
over one read-only SQLite database; their output is a plain-text table.

The executor and its guarantees (read-only file, authorizer, one statement, time and size limits)
are ``aloft.gym.tools.sql_executor``; results and their rendering are ``aloft.gym.tools.sql_result``.
Both are re-exported here, so ``from aloft.gym.tools.sql import SqlExecutor`` keeps working.
"""

from __future__ import annotations

from pathlib import Path

from aloft.gym.tools.base import ToolError, ToolGroup, tool
from aloft.gym.tools.sql_executor import (
    COUNT_LIMIT,
    MAX_SQL_CHARS,
    MAX_VALUE_BYTES,
    READ_ONLY_PRAGMAS,
    SqlExecutor,
)
from aloft.gym.tools.sql_result import SqlResult, render_table

__all__ = [
    "COUNT_LIMIT",
    "MAX_SQL_CHARS",
    "MAX_VALUE_BYTES",
    "READ_ONLY_PRAGMAS",
    "SqlExecutor",
    "SqlResult",
    "SqlTools",
    "render_table",
]


class SqlTools(ToolGroup):
    """SQL tools over one read-only SQLite database (see ``SqlExecutor`` for the guarantees).

    Tools: ``execute_sql(query)`` (the result as a table, or ``Error: ...``), ``list_tables()``
    and ``describe_table(table)``. A failing query is a failed call (``ok=False``, counted in
    ``metrics()`` as a tool error) whose output is the error message for the model. Calls run on
    the caller's thread: the executor's progress handler enforces the time limit.
    """

    name = "sql"

    def __init__(
        self,
        db_path: str | Path,
        *,
        timeout_s: float = 5.0,
        max_rows: int | None = 50,
        max_cell_chars: int = 100,
        immutable: bool = False,
        table_format: str = "github",
    ) -> None:
        super().__init__(timeout_s=None)
        self.executor = SqlExecutor(
            db_path,
            timeout_s=timeout_s,
            max_rows=max_rows,
            max_cell_chars=max_cell_chars,
            immutable=immutable,
            table_format=table_format,
        )

    @tool
    def execute_sql(self, query: str) -> str:
        """Run one read-only SQLite query (SELECT / WITH) and return its result as a table.

        Args:
            query: A single SQLite SELECT statement.
        """
        result = self.executor.execute(query)
        if result.error is not None:
            raise ToolError(result.error)
        return self.executor.render(result)

    @tool
    def list_tables(self) -> str:
        """List the tables and views of the database."""
        return "\n".join(self.executor.tables()) or "(the database has no tables)"

    @tool
    def describe_table(self, table: str) -> str:
        """Show the CREATE statement of a table or view.

        Args:
            table: The table or view name.
        """
        result = self.executor.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND name = "
            + _quote_literal(table)
            + " COLLATE NOCASE",
            max_rows=1,
        )
        if result.error is not None:
            raise ToolError(result.error)
        if not result.rows:
            raise ToolError(f"no table named {table!r}; tables: {', '.join(self.executor.tables())}")
        return str(result.rows[0][0]).strip() + ";"

    def on_close(self) -> None:
        self.executor.close()


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
