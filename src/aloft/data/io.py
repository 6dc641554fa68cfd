"""Read and write dataset files: ``.jsonl`` (one JSON object per line) and ``.parquet``.

Writes are atomic (a temporary file in the same folder, then ``os.replace``), so a crash never
leaves a half-written dataset behind. Parquet files hold the same rows with native nested types
(a list of message structs for ``prompt``), so verl/SkyRL parquet files read as they are.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from aloft.data.rows import DatasetRow, validate_row

__all__ = ["SUPPORTED_SUFFIXES", "read_rows", "write_rows"]

SUPPORTED_SUFFIXES = (".jsonl", ".parquet")


def read_rows(path: str | os.PathLike[str], default_env: str | None = None) -> list[DatasetRow]:
    """Read and validate every row of a ``.jsonl`` or ``.parquet`` file.

    ``default_env`` is the ``env_class`` of rows that have none. Errors (missing file, unknown
    format, bad JSON, invalid row) are one ``ValueError``/``FileNotFoundError`` line naming the file,
    the line or row, and the fix.
    """
    path = Path(path)
    suffix = _check_suffix(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: dataset file not found; check the path, or create it with aloft.data.build_dataset + write_rows"
        )
    raw_rows = _read_jsonl(path) if suffix == ".jsonl" else _read_parquet(path)
    if not raw_rows:
        raise ValueError(f"{path}: the dataset has no rows; regenerate the file")
    return [validate_row(raw, index, str(path), default_env) for index, raw in enumerate(raw_rows)]


def write_rows(path: str | os.PathLike[str], rows: list[dict[str, Any]]) -> None:
    """Write raw row dicts to a ``.jsonl`` or ``.parquet`` file, atomically (parent folders are created).

    Rows are written as given; ``read_rows`` validates them when they are read.
    """
    path = Path(path)
    suffix = _check_suffix(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".jsonl":
        _atomic_write(path, "w", lambda file: _write_jsonl(file, rows, path))
    else:
        table = _to_arrow_table(rows, path)
        _atomic_write(path, "wb", lambda file: pq.write_table(table, file))


def _check_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ValueError(
            f"{path}: unsupported dataset format {suffix or '(no extension)'!r}; use a .jsonl or .parquet file"
        )
    return suffix


def _read_jsonl(path: Path) -> list[Any]:
    rows = []
    with path.open(encoding="utf-8") as file:
        for line_number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{path} line {line_number}: invalid JSON ({error.msg} at column {error.colno}); "
                    "fix the line or regenerate the file"
                ) from None
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a readable parquet file ({error}); regenerate the file") from None
    return table.to_pylist()


def _write_jsonl(file: IO[str], rows: list[dict[str, Any]], path: Path) -> None:
    for index, row in enumerate(rows):
        try:
            line = json.dumps(row, ensure_ascii=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path} row {index}: cannot be written as JSON ({error})") from None
        file.write(line + "\n")


def _to_arrow_table(rows: list[dict[str, Any]], path: Path) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError) as error:
        # Name the offending column: parquet needs one type per column across all rows.
        columns = sorted({key for row in rows for key in row})
        for column in columns:
            try:
                pa.array([row.get(column) for row in rows])
            except (pa.ArrowException, TypeError):
                raise ValueError(
                    f"{path}: column {column!r} has values of different types across rows ({error}); "
                    "give it one type in every row or write a .jsonl file"
                ) from None
        raise ValueError(f"{path}: rows cannot be stored as parquet ({error}); write a .jsonl file") from None


def _atomic_write(path: Path, mode: str, write: Callable[[Any], None]) -> None:
    descriptor, temporary_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(descriptor, mode, encoding=encoding) as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary_name, path)
    except BaseException:
        Path(temporary_name).unlink(missing_ok=True)
        raise
