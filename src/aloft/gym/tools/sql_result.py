"""The result of one read-only SQL query (``SqlResult``) and its rendering as a plain-text table
(``render_table``, with ``tabulate``): what a model sees for a query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

__all__ = ["SqlResult", "render_table"]


@dataclass(frozen=True)
class SqlResult:
    """The outcome of one ``SqlExecutor.execute``."""

    columns: list[str]
    """Column names of the result (empty on error)."""
    rows: list[tuple[Any, ...]]
    """The first ``max_rows`` rows, as SQLite returned them (empty on error)."""
    error: str | None = None
    """One readable line when the query failed (syntax error, denied action, time limit), else None."""
    truncated: bool = False
    """True when the query returned more rows than were kept."""
    omitted_rows: int = 0
    """How many rows were not kept (counted up to ``COUNT_LIMIT``; see ``omitted_exact``)."""
    omitted_exact: bool = True
    """False when counting stopped early (at ``COUNT_LIMIT`` or the time limit): there are at
    least ``omitted_rows`` more rows."""
    elapsed_s: float = 0.0
    render_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def render(self, **options: Any) -> str:
        """The result as text: ``Error: ...`` or a plain-text table with a "(k more rows)" note.

        ``options`` are ``render_table``'s (``max_cell_chars``, ``table_format``); the executor's
        settings are used for the ones not given.
        """
        if self.error is not None:
            return f"Error: {self.error}"
        note = None
        if self.truncated:
            shown = len(self.rows)
            if self.omitted_exact:
                note = f"({self.omitted_rows} more rows; showing the first {shown})"
            elif self.omitted_rows:
                note = f"(at least {self.omitted_rows} more rows; showing the first {shown})"
            else:
                note = f"(showing the first {shown} rows; the rest were not counted: time limit)"
        return render_table(self.columns, self.rows, note=note, **{**self.render_options, **options})


def render_table(
    columns: list[str],
    rows: list[tuple[Any, ...]],
    *,
    max_cell_chars: int = 100,
    table_format: str = "github",
    note: str | None = None,
) -> str:
    """A readable plain-text table (``tabulate``'s ``table_format``, markdown pipes by default).

    NULL is shown as ``NULL``, floats with up to 12 significant digits (``2328.6`` rather than
    ``2328.6000000000004``), blobs as ``<blob, N bytes>``; newlines and tabs inside a value are shown
    escaped so that each row stays on one line, and values longer than ``max_cell_chars`` end in
    ``...``. Numeric columns are right-aligned. ``note`` is added on its own line below the table.
    """
    cells = [[_format_cell(value, max_cell_chars) for value in row] for row in rows]
    headers = [_format_cell(name, max_cell_chars) for name in columns]
    if not columns:
        text = "(the statement returned no columns)"
    elif not rows:
        text = tabulate([], headers=headers, tablefmt=table_format) + "\n(no rows)"
    else:
        alignment = [
            "right" if _is_numeric_column([row[index] for row in rows]) else "left"
            for index in range(len(columns))
        ]
        text = tabulate(
            cells, headers=headers, tablefmt=table_format, disable_numparse=True, colalign=alignment
        )
    return f"{text}\n{note}" if note else text


def _is_numeric_column(values: list[Any]) -> bool:
    present = [value for value in values if value is not None]
    return bool(present) and all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in present
    )


def _format_cell(value: Any, max_chars: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, float):
        text = format(value, ".12g")
    elif isinstance(value, bytes):
        text = f"<blob, {len(value)} bytes>"
    else:
        text = str(value).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if len(text) > max_chars:
        text = text[: max(max_chars - 3, 1)] + "..."
    return text
