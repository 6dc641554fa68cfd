"""Whole-file writes that a concurrent reader never sees half done.

Ranks of a data-parallel run start together, and each writes then reads the same small files of
the run directory (``config.yaml``, ``precision.json``): a plain ``write_text`` truncates the file
first, so another rank reading it meanwhile finds it empty. A temporary file in the same folder,
named uniquely, then ``os.replace`` (atomic on POSIX) means a reader sees the old file or the whole
new one. (The file gets the default mode, and a symbolic link at ``path`` is replaced by a file.)
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["write_text_atomically"]


def write_text_atomically(path: str | Path, text: str) -> None:
    """Replace ``path``'s contents with ``text`` (UTF-8) in one step; the temporary file is removed
    if the write fails."""
    path = Path(path)
    # Unique per write, across threads, processes and hosts sharing the file system (ranks).
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
