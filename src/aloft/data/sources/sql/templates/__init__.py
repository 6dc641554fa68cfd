"""Question / gold-SQL templates, written for aloft, one list per database.

A template's question and SQL share named slots (``{country}``); ``slots`` is a query over the same
database whose columns are named like the slots, and each of its rows fills one instance: raw in the
question, as a quoted SQL literal in the query. ``aloft.data.sources.sql.pairs`` draws up to
``count`` instances per template (a fixed shuffle of the slot rows, seeded by the template key), keeps
only those whose gold query returns rows that do not depend on SQLite's scan order, and drops
duplicates. A template without slots is one pair.

Every question names the columns it wants, in order, and says when the rows must be ordered, so that
the gold result is the only right one (see the ``text2sql`` env for how results are compared).

The template type is ``base.PairTemplate``; the lists are grouped by subject: ``science``
(``elements``, ``penguins``), ``countries`` (``world``, ``gapminder``), ``transport`` (``cars``,
``flights``) and ``organizations`` (``chinook``, ``school``, ``shop``, ``library``). ``TEMPLATES``
maps each database id to its list.
"""

from __future__ import annotations

from aloft.data.sources.sql.templates.base import PairTemplate
from aloft.data.sources.sql.templates.countries import GAPMINDER, WORLD
from aloft.data.sources.sql.templates.organizations import CHINOOK, LIBRARY, SCHOOL, SHOP
from aloft.data.sources.sql.templates.science import ELEMENTS, PENGUINS
from aloft.data.sources.sql.templates.transport import CARS, FLIGHTS

__all__ = ["TEMPLATES", "PairTemplate"]

TEMPLATES: dict[str, list[PairTemplate]] = {
    "chinook": CHINOOK,
    "school": SCHOOL,
    "shop": SHOP,
    "elements": ELEMENTS,
    "world": WORLD,
    "penguins": PENGUINS,
    "gapminder": GAPMINDER,
    "cars": CARS,
    "library": LIBRARY,
    "flights": FLIGHTS,
}
"""Database id -> its templates."""
