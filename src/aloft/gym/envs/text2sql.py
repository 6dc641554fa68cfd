"""``text2sql``: the SkyRL-SQL protocol. Think, probe a real SQLite database, then answer with SQL.

Each reply of the model must be::

    <think> reasoning </think>  then either  <sql> a probe query </sql>
                                      or     <solution> the final query </solution>

- A ``<sql>`` probe runs read-only on the row's database (``aloft.gym.tools.sql``: time limit,
  at most ``max_rows`` rows) and is answered, as in SkyRL-SQL, with one user message::

      <observation>
      the result table, or the error
      <reminder>You have 3 turns left to complete the task.</reminder>
      </observation>

  An observation longer than ``max_observation_chars`` keeps its first lines and says it was cut.
  The episode goes on.
- A ``<solution>`` ends the episode: the query is executed and its result compared with the gold
  query's result on the same database.

Reward (on the final turn; earlier turns get 0)::

    -1  bad format: a reply without a <think>...</think> block before its action, without a
        <sql> or <solution> block, with an empty block, with a <solution> that contains other
        protocol tags, or with an <observation> the model wrote itself; or no <solution> within
        max_turns replies (a probe on the last turn). A badly formatted reply ends the episode.
     0  well formatted, but the solution fails to run or its rows differ from the gold rows.
     1  the solution's rows equal the gold query's rows.

Config ``reward="partial"`` (not in SkyRL-SQL; for small models, which learn text-to-SQL faster from
a dense reward) gives a well-formed solution that runs but returns wrong rows ``PARTIAL_WEIGHT``
times its row-level F1 against the gold rows (rows as normalized value tuples, multisets), so a
closer wrong answer earns more and every wrong answer stays below a right one; -1 and 1 are as
above. The ``row_f1`` metric reports that F1 for every graded solution (1 when right).

What "equal" means: rows are compared as value tuples (column names are ignored; the column order
and count matter). Floats are compared rounded to 6 decimals, and 3.0 equals 3. If the gold query
has a top-level ORDER BY (not one inside a subquery or window), the rows must come in the same
order; otherwise they are compared as multisets (order-insensitive, duplicates count). Config
``compare_order="never"`` always compares multisets; ``"set"`` compares sets, ignoring order and
duplicates, as SkyRL-SQL's reward does.

Action parsing: the first ``<sql>`` or ``<solution>`` block of a reply is its action and text after
it is ignored (generation normally stops at ``</sql>`` / ``</solution>``: use them as stop strings);
a block left open at the very end of the reply counts too (an engine that drops the stop string).
A markdown code fence inside the block is removed.

Config (all optional): ``max_turns`` (5, as in SkyRL-SQL; a row's ``max_turns`` overrides it),
``timeout_s`` (5.0: per probe and for the solution), ``gold_timeout_s`` (30.0), ``max_rows`` (50
rows shown per observation, as SkyRL-SQL), ``max_cell_chars`` (80), ``max_observation_chars`` (9000,
SkyRL-SQL's threshold), ``format_reminder`` (False; True restates the reply format in every
observation's reminder, ``FORMAT_REMINDER``), ``db_dir`` (where ``db_id`` is looked up;
default ``$ALOFT_CACHE_DIR/data/sql`` or ``~/.cache/aloft/data/sql``, where ``aloft.data``'s
``sql`` builder puts its databases), ``compare_order`` (``"auto"``, ``"never"`` or ``"set"``), ``reward`` (``"execution"``: -1 / 0 / 1,
or ``"partial"``), ``immutable``
(False; True opens the file with ``immutable=1``, only for files nothing writes while training).

Row extras: the database as ``db_path`` (absolute, or relative to ``db_dir``) and/or ``db_id``
(``<db_dir>/<db_id>.sqlite`` or the Spider/BIRD layout ``<db_dir>/<db_id>/<db_id>.sqlite``; the
first file that exists wins); the gold query as ``gold_sql`` or ``reward_spec["ground_truth"]``;
``question`` (informational; the question itself is in the prompt).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from aloft.gym.core import Env, StepOutput
from aloft.gym.tools.sql import SqlExecutor, SqlTools
from aloft.tool_calls import parse_tag_calls
from aloft.types import Message

__all__ = [
    "Reply",
    "Text2SqlEnv",
    "default_db_dir",
    "has_top_level_order_by",
    "lenient_final_query",
    "parse_reply",
    "results_match",
    "row_f1",
    "without_literals",
]

DEFAULT_CONFIG: dict[str, Any] = {
    "max_turns": 5,
    "timeout_s": 5.0,
    "gold_timeout_s": 30.0,
    "max_rows": 50,
    "max_cell_chars": 80,
    "max_observation_chars": 9000,
    "format_reminder": False,
    "db_dir": None,
    "compare_order": "auto",
    "reward": "execution",
    "immutable": False,
}
PARTIAL_WEIGHT = 0.5
"""``reward="partial"``: a wrong result earns this times its row F1 (at most 0.5, below a right one)."""
FORMAT_REMINDER = (
    "Start your reply with <think>...</think>, then write <sql>one query</sql> or "
    "<solution>the final SQL query</solution>."
)
"""Appended to each observation's reminder with ``format_reminder=True`` (not in SkyRL-SQL: for small
models, which after an observation tend to drop the <think> block or to write the observation themselves)."""
FLOAT_DECIMALS = 6
"""Floats are compared rounded to this many decimals."""

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_PROTOCOL_TAG = re.compile(r"</?(?:think|sql|solution|observation|reminder)\b", re.IGNORECASE)
_OBSERVATION_TAG = re.compile(r"</?observation\b", re.IGNORECASE)


def default_db_dir() -> Path:
    """``$ALOFT_CACHE_DIR/data/sql`` (default ``~/.cache/aloft/data/sql``)."""
    root = Path(os.environ.get("ALOFT_CACHE_DIR") or Path.home() / ".cache" / "aloft").expanduser()
    return root / "data" / "sql"


# ---- parsing a reply ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Reply:
    """One reply, parsed: its action (``"sql"``, ``"solution"`` or None) and query, or why it is
    badly formatted (``problem``; None when the format is fine)."""

    action: str | None
    query: str | None
    problem: str | None


def parse_reply(text: str) -> Reply:
    """Parse one reply of the protocol (see the module docstring for the rules)."""
    calls = parse_tag_calls(text, ["sql", "solution"], allow_unclosed=True, fenced_tags=("sql", "solution"))
    if not calls:
        return Reply(None, None, "no <sql> or <solution> block")
    call = calls[0]
    start = text.find(call.raw)
    before, query = text[:start], call.arguments["input"]
    if _OBSERVATION_TAG.search(before):
        return Reply(
            call.name, query, "the reply contains an <observation> tag; only the environment writes those"
        )
    if not _THINK.search(before):
        return Reply(call.name, query, f"no <think>...</think> block before the <{call.name}> block")
    if not query:
        return Reply(call.name, query, f"the <{call.name}> block is empty")
    if call.name == "solution" and _PROTOCOL_TAG.search(query):
        return Reply(call.name, query, "the <solution> block contains protocol tags")
    return Reply(call.name, query, None)


_FENCED_SQL = re.compile(r"```(?:sql|sqlite)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_TAGGED = re.compile(r"<(solution|sql)>(.*?)(?:</\1>|\Z)", re.DOTALL)


def lenient_final_query(reply: str) -> str | None:
    """The query a reply most likely means as its answer, whatever its format: the first
    ``<solution>`` block, else the last fenced ```sql block, else the last ``<sql>`` block."""
    tagged = [(tag, body.strip()) for tag, body in _TAGGED.findall(reply)]
    solutions = [body for tag, body in tagged if tag == "solution" and body]
    if solutions:
        return _FENCED_SQL.sub(lambda match: match.group(1), solutions[0]).strip().strip("`").strip() or None
    fenced = [body.strip() for body in _FENCED_SQL.findall(reply) if body.strip()]
    if fenced:
        return fenced[-1]
    probes = [body for tag, body in tagged if tag == "sql" and body]
    return probes[-1] if probes else None


# ---- comparing results ----------------------------------------------------------------------------
_LITERAL_OR_COMMENT = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL
)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def without_literals(sql: str) -> str:
    """``sql`` with its string literals, quoted identifiers and comments blanked out: only its code."""
    return _LITERAL_OR_COMMENT.sub(" ", sql)


def has_top_level_order_by(sql: str) -> bool:
    """Whether ``sql`` orders its final result (an ORDER BY outside parentheses, strings and comments)."""
    text = without_literals(sql)
    depth, outside = 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            outside.append(char)
    return bool(_ORDER_BY.search("".join(outside)))


def _normalize_value(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return value
        if value.is_integer():
            return int(value)
        return round(value, FLOAT_DECIMALS)
    return value


def _normalize(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(_normalize_value(value) for value in row) for row in rows]


def results_match(rows: list[tuple[Any, ...]], gold_rows: list[tuple[Any, ...]], ordered: bool) -> bool:
    """Whether ``rows`` equal ``gold_rows``: as lists when ``ordered``, else as multisets (values
    normalized: floats rounded to ``FLOAT_DECIMALS`` decimals, integral floats as ints)."""
    if len(rows) != len(gold_rows):
        return False
    mine, gold = _normalize(rows), _normalize(gold_rows)
    return mine == gold if ordered else Counter(mine) == Counter(gold)


def row_f1(rows: list[tuple[Any, ...]], gold_rows: list[tuple[Any, ...]]) -> float:
    """F1 of ``rows`` against ``gold_rows`` as multisets of normalized value tuples (order ignored,
    duplicates counted): 2PR / (P + R) with P = shared / len(rows), R = shared / len(gold_rows)."""
    if not rows and not gold_rows:
        return 1.0
    shared = sum((Counter(_normalize(rows)) & Counter(_normalize(gold_rows))).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(rows), shared / len(gold_rows)
    return 2 * precision * recall / (precision + recall)


@lru_cache(maxsize=2048)
def _gold_rows(
    db_path: str, stamp: tuple[int, int], gold_sql: str, timeout_s: float
) -> tuple[tuple[Any, ...], ...]:
    """The gold query's rows, cached per (file, its mtime and size, query): envs are built per episode."""
    with SqlExecutor(db_path, timeout_s=timeout_s, max_rows=None) as executor:
        result = executor.execute(gold_sql)
    if result.error is not None:
        raise RuntimeError(
            f"text2sql env: the row's gold query fails on {db_path!r}: {result.error}; fix the dataset row"
        )
    return tuple(result.rows)


# ---- the env ------------------------------------------------------------------------------------
class Text2SqlEnv(Env):
    """Multi-turn text-to-SQL over a real read-only SQLite database. See the module docstring."""

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        unknown = sorted(set(self.config) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(
                f"text2sql env: unknown config keys {unknown}; accepted keys: {sorted(DEFAULT_CONFIG)}"
            )
        settings = {**DEFAULT_CONFIG, **self.config}
        if self.extras.get("max_turns") is not None:
            settings["max_turns"] = self.extras["max_turns"]
        self.max_turns: int = settings["max_turns"]
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"text2sql env: max_turns must be an integer >= 1, got {self.max_turns!r}")
        if settings["compare_order"] not in ("auto", "never", "set"):
            raise ValueError(
                "text2sql env: compare_order must be 'auto', 'never' or 'set', "
                f"got {settings['compare_order']!r}"
            )
        self.compare_sets = settings["compare_order"] == "set"
        if settings["reward"] not in ("execution", "partial"):
            raise ValueError(
                f"text2sql env: reward must be 'execution' or 'partial', got {settings['reward']!r}"
            )
        self.partial = settings["reward"] == "partial"
        self.format_reminder = bool(settings["format_reminder"])
        self.max_observation_chars = int(settings["max_observation_chars"])
        self.timeout_s = float(settings["timeout_s"])
        self.gold_timeout_s = float(settings["gold_timeout_s"])
        db_dir = Path(settings["db_dir"]).expanduser() if settings["db_dir"] else default_db_dir()
        self.db_path = _resolve_db_path(self.extras, db_dir)
        self.gold_sql = self._read_gold_sql()
        self.ordered = settings["compare_order"] == "auto" and has_top_level_order_by(self.gold_sql)
        self.tools = SqlTools(
            self.db_path,
            timeout_s=self.timeout_s,
            max_rows=settings["max_rows"],
            max_cell_chars=settings["max_cell_chars"],
            immutable=bool(settings["immutable"]),
        )
        self._start_episode()

    def _read_gold_sql(self) -> str:
        gold = self.extras.get("gold_sql")
        if gold is None:
            reward_spec = self.extras.get("reward_spec")
            gold = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        if not isinstance(gold, str) or not gold.strip():
            raise ValueError(
                "text2sql env: the row has no gold query; put it in the row's 'gold_sql' column "
                "or in reward_spec.ground_truth"
            )
        return gold

    def _start_episode(self) -> None:
        self._turns = 0
        self._probes = 0
        self._sql_errors = 0
        self._format_ok = False
        self._correct = False
        self._answer_correct = False
        self._probe_failed = False
        self._row_f1 = 0.0
        self._done = False

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        self._start_episode()
        self.tools.reset_stats()
        return super().reset(prompt)

    def step(self, action: str) -> StepOutput:
        if self._done:
            raise RuntimeError("text2sql env: step() called after the episode ended; call reset() first")
        self._turns += 1
        reply = parse_reply(action)
        info: dict[str, Any] = {"turn": self._turns, "action": reply.action}
        if reply.problem is not None:
            self._answer_correct = self._lenient_answer_correct(action)
            return self._finish(-1.0, {**info, "format_error": reply.problem})
        assert reply.query is not None
        if reply.action == "solution":
            return self._grade(reply.query, info)
        if self._turns >= self.max_turns:
            self._answer_correct = self._lenient_answer_correct(action)
            return self._finish(
                -1.0, {**info, "format_error": f"no <solution> within {self.max_turns} turns"}
            )
        self._probes += 1
        result = self.tools.call("execute_sql", {"query": reply.query})
        if not result.ok:
            self._sql_errors += 1
            self._probe_failed = True
        left = self.max_turns - self._turns
        if left == 1:
            reminder = "You have 1 turn left: your next reply must give the final <solution>."
        else:
            reminder = f"You have {left} turns left to complete the task."
        if self.format_reminder:
            reminder += f" {FORMAT_REMINDER}"
        output = _cut(result.output, self.max_observation_chars)
        content = f"<observation>\n{output}\n<reminder>{reminder}</reminder>\n</observation>"
        return StepOutput(
            observations=[{"role": "user", "content": content}],
            reward=0.0,
            done=False,
            info={**info, "sql_ok": result.ok, "turns_left": left},
        )

    def _grade(self, query: str, info: dict[str, Any]) -> StepOutput:
        self._format_ok = True
        error = self._error_or_correct(query)
        if error is not None:
            self._sql_errors += 1
            return self._finish(0.0, {**info, "correct": False, "sql_error": error})
        self._answer_correct = self._correct
        if self._correct:
            reward = 1.0
        else:
            reward = PARTIAL_WEIGHT * self._row_f1 if self.partial else 0.0
        return self._finish(reward, {**info, "correct": self._correct, "ordered": self.ordered})

    def _error_or_correct(self, query: str) -> str | None:
        """Run ``query`` and set ``self._correct``; returns the query's error, if it fails."""
        gold = list(_gold_rows(str(self.db_path), _stamp(self.db_path), self.gold_sql, self.gold_timeout_s))
        # One row more than gold tells "too many rows" apart; as sets, duplicates may make it longer;
        # the partial reward's F1 needs the rows themselves.
        row_cap = max(100 * len(gold), 10_000) if self.compare_sets or self.partial else len(gold) + 1
        with SqlExecutor(self.db_path, timeout_s=self.timeout_s, max_rows=row_cap) as executor:
            result = executor.execute(query)
        if result.error is not None:
            self._correct = False
            return result.error
        if self.compare_sets:
            self._correct = not result.truncated and set(_normalize(result.rows)) == set(_normalize(gold))
        else:
            self._correct = not result.truncated and results_match(result.rows, gold, self.ordered)
        self._row_f1 = 1.0 if self._correct else row_f1(result.rows, gold)
        return None

    def _lenient_answer_correct(self, reply: str) -> bool:
        """Whether the badly formatted final reply still holds a right query: its ``<solution>`` block,
        else its last fenced ```sql block, else its last ``<sql>`` block. A diagnostic only (the
        ``answer_correct`` metric: SQL skill apart from the protocol); the reward stays -1."""
        query = lenient_final_query(reply)
        if query is None:
            return False
        self._error_or_correct(query)
        answer, self._correct, self._row_f1 = self._correct, False, 0.0
        return answer

    def _finish(self, reward: float, info: dict[str, Any]) -> StepOutput:
        self._done = True
        return StepOutput(observations=[], reward=reward, done=True, info=info)

    def metrics(self) -> dict[str, float]:
        """``format_ok`` and ``correct`` (0/1), ``answer_correct`` (1 when the final reply's query is
        right even if the reply breaks the format: execution accuracy apart from the protocol),
        ``turns`` taken, ``probes`` run, ``sql_errors`` (failed probes plus a solution that failed
        to run), ``probe_failed`` (1 when a probe got an error observation) and ``recovered`` (1 when
        such an episode still ended correct: recovery rate = mean recovered / mean probe_failed)."""
        return {
            "format_ok": float(self._format_ok),
            "correct": float(self._correct),
            "answer_correct": float(self._answer_correct),
            "turns": float(self._turns),
            "probes": float(self._probes),
            "sql_errors": float(self._sql_errors),
            "probe_failed": float(self._probe_failed),
            "recovered": float(self._probe_failed and self._correct),
        } | ({"row_f1": self._row_f1} if self.partial else {})

    def close(self) -> None:
        self.tools.close()
        super().close()


def _cut(text: str, max_chars: int) -> str:
    """``text`` whole if it fits in ``max_chars``, else its first lines that fit and a note."""
    if len(text) <= max_chars:
        return text
    kept, size = [], 0
    for line in text.splitlines():
        if size + len(line) + 1 > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    return (
        "\n".join(kept)
        + f"\n(cut to its first {len(kept)} lines: the result is longer than {max_chars} characters)"
    )


def _stamp(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_mtime_ns, status.st_size


def _resolve_db_path(extras: dict[str, Any], db_dir: Path) -> Path:
    candidates: list[Path] = []
    db_path, db_id = extras.get("db_path"), extras.get("db_id")
    if db_path:
        path = Path(str(db_path)).expanduser()
        candidates.append(path if path.is_absolute() else db_dir / path)
    if db_id:
        candidates += [db_dir / f"{db_id}.sqlite", db_dir / str(db_id) / f"{db_id}.sqlite"]
    if not candidates:
        raise ValueError("text2sql env: the row names no database; give it a 'db_path' or a 'db_id' column")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(candidate) for candidate in candidates)
    raise FileNotFoundError(
        f"text2sql env: no database file for this row (tried {tried}); build the built-in databases with "
        "`aloft data build sql` (aloft.data.sources.sql.database_path) or set the env config's db_dir"
    )
