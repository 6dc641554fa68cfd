"""The question / gold-SQL template: a question and its gold query with named slots, and the query
that fills them (how ``aloft.data.sources.sql.pairs`` turns templates into pairs is described in
``aloft.data.sources.sql.templates``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PairTemplate"]


@dataclass(frozen=True)
class PairTemplate:
    """One question / gold-SQL template (see ``aloft.data.sources.sql.templates``)."""

    key: str
    question: str
    sql: str
    slots: str | None = None
    count: int = 8
