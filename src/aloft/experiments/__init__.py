"""Experiments that reproduce a published result end to end, each one command.

- ``skyrl_sql``: SkyRL-SQL's multi-turn against single-turn comparison at small scale
  (``aloft experiment skyrl-sql``).
"""

EXPERIMENTS = {"skyrl-sql": "aloft.experiments.skyrl_sql"}
"""CLI name -> module."""
