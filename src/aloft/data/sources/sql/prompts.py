"""The prompts of a text-to-SQL row, in SkyRL-SQL's layout (the wording is aloft's own).

SkyRL-SQL's rows carry two messages, and aloft's keep the same layout:

- a **system** message: the task, "Database Engine: SQLite", the sections ``{db_details}``,
  ``{external_knowledge}`` and ``{question}`` left as literal placeholders (SkyRL-SQL never fills them
  in the system message), the instructions, the format (think in ``<think>``, probe with ``<sql>``,
  read ``<observation>``, answer in ``<solution>``; long results cut to 50 rows) and one worked
  example;
- a **user** message that fills the placeholders by name:
  ``"{db_details}:" + schema + ";\\n {external_knowledge}: " + knowledge + ";\\n {question}: " + question``.

``SINGLE_TURN_SYSTEM_PROMPT`` is the 1-turn variant: no probes, the answer at once.

``format_hint(max_turns)`` is one optional line appended to the user message, restating the reply
format. Not part of SkyRL-SQL's layout: its 7B model follows the system message, but
Qwen2.5-Coder-0.5B-Instruct, sampled at temperature 1.0 on 32 training questions at 1 turn, wrote a
well-formed reply 3% of the time without it (mostly markdown code fences, or echoing
"{db_details}:") and 31% with it (2026-12-05). Group-relative RL needs some well-formed replies to
learn from, so the small-scale experiment turns it on.
"""

from __future__ import annotations

__all__ = [
    "MULTI_TURN_SYSTEM_PROMPT",
    "SINGLE_TURN_SYSTEM_PROMPT",
    "format_hint",
    "system_prompt",
    "user_prompt",
]

_TASK = """
Task overview:
You are an expert in SQL and data analysis. You are given the schema of a database and a question in \
plain language. Understand the schema and write one valid SQL query that answers the question{turns}. \
Break the problem down, reason it through, then give your query.

Database engine:
SQLite

Database schema:
{{db_details}}
The schema gives the tables and their columns, with types, primary keys, foreign keys and other \
constraints.

External knowledge:
{{external_knowledge}}

Question:
{{question}}

Instructions:
- Return only what the question asks for: when it asks for given columns, select exactly those, in \
that order, and nothing else.
- Return all of it: no row or column the question asks for may be missing.
- Before the final query, think it through: what the question needs, what you have found so far, \
new ideas, whether the current step is right, what to fix{probe_thought}, and earlier steps worth \
revisiting.
"""

_MULTI_TURN_FORMAT = """
Format:
- Think inside <think>...</think> each time you get new information.
- To explore the database or check an idea, write one SQL query inside a single <sql>...</sql> block. \
Its result, or its error, comes back inside <observation>...</observation>; think again and refine.
- A long result is cut to its first 50 rows.
- When you need no more exploration, or you have no turns left, give the final SQL query inside \
<solution>...</solution>.

---------------------------- EXAMPLE ----------------------------
Question: how many books are on loan?
Database schema:
CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT, status TEXT);

<think>I need the books whose status means "on loan". First I check which status values exist.</think>
<sql>SELECT DISTINCT status FROM books;</sql>
<observation>
| status    |
|:----------|
| available |
| on loan   |
<reminder>You have 4 turns left to complete the task.</reminder>
</observation>
<think>The value is 'on loan'. Counting those rows answers the question.</think>
<solution>SELECT COUNT(*) FROM books WHERE status = 'on loan';</solution>
-------------------------- END OF EXAMPLE --------------------------
"""

_SINGLE_TURN_FORMAT = """
Format:
- Think inside <think>...</think> first.
- You cannot run queries: give the final SQL query at once, inside <solution>...</solution>.

---------------------------- EXAMPLE ----------------------------
Question: how many books are on loan?
Database schema:
CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT, status TEXT); -- status: 'available' or 'on loan'

<think>Books on loan have the status 'on loan'; counting them answers the question.</think>
<solution>SELECT COUNT(*) FROM books WHERE status = 'on loan';</solution>
-------------------------- END OF EXAMPLE --------------------------
"""

MULTI_TURN_SYSTEM_PROMPT = (
    _TASK.format(turns=" within a limited number of turns", probe_thought=", which queries to run")
    + _MULTI_TURN_FORMAT
)
"""The system message of a multi-turn row (probes allowed)."""
SINGLE_TURN_SYSTEM_PROMPT = _TASK.format(turns="", probe_thought="") + _SINGLE_TURN_FORMAT
"""The system message of a 1-turn row: the model must answer at once."""


def system_prompt(max_turns: int) -> str:
    """``MULTI_TURN_SYSTEM_PROMPT``, or ``SINGLE_TURN_SYSTEM_PROMPT`` when ``max_turns`` is 1."""
    return SINGLE_TURN_SYSTEM_PROMPT if max_turns == 1 else MULTI_TURN_SYSTEM_PROMPT


def user_prompt(schema: str, question: str, external_knowledge: str = "") -> str:
    """The user message of a row, filling the system message's placeholders by name."""
    return (
        "{db_details}:"
        + schema
        + ";\n {external_knowledge}: "
        + external_knowledge
        + ";\n {question}: "
        + question
    )


def format_hint(max_turns: int) -> str:
    """The optional last line of the user message that restates the reply format (module docstring)."""
    if max_turns == 1:
        return "\n\nReply in this format: <think>your reasoning</think> then <solution>the final SQL query</solution>."
    return (
        "\n\nReply in this format: <think>your reasoning</think> then either <sql>one query to explore the "
        "database</sql> or <solution>the final SQL query</solution>."
    )
