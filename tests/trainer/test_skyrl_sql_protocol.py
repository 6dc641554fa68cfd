"""The SkyRL-SQL protocol end to end on scripted replies: rows of the ``sql`` builder (5-turn and 1-turn),
the real generator and env on a real held-out database, the rewards the trainer would see, and eval
summarised per eval set."""

from __future__ import annotations

import asyncio
import copy

import pytest

from aloft.data import build_dataset, validate_row
from aloft.data.sources.sql import pairs
from aloft.inference import make_engine
from aloft.models import load_tokenizer
from aloft.rollout import EpisodeLimits, Generator
from aloft.trainer import evaluate
from aloft.types import SamplingParams

# The tiny test tokenizer spends about a token per character: room for whole replies and tables.
LIMITS = EpisodeLimits(max_turns=5, max_total_tokens=16384)
SAMPLING = SamplingParams(max_tokens=1024, temperature=0.0)


@pytest.fixture(scope="module")
def library_pair():
    """A held-out pair with a multi-row answer, and its row at 5 turns and at 1 turn."""
    pair = next(p for p in pairs("library", "heldout") if p["template"] == "library.books_by_author")
    rows = {}
    for turns in (5, 1):
        raw = build_dataset("sql", n=0, seed=0, split="heldout", max_turns=turns)
        [chosen] = [r for r in raw if r["extra_info"]["pair_id"] == pair["id"]]
        rows[turns] = validate_row(chosen, 0, "sql")
    return pair, rows


def _run(tokenizer, rows, replies):
    engine = make_engine("scripted", tokenizer=tokenizer, replies=replies)
    generator = Generator(engine, tokenizer, limits=LIMITS)
    return generator.generate_sync(rows, n=1, sampling=SAMPLING, seed=0)[0].trajectories[0]


def test_five_turns_probe_fail_recover_and_answer(library_pair, tiny_model_dir):
    pair, rows = library_pair
    tokenizer = load_tokenizer(tiny_model_dir)
    replies = [
        "<think>Which tables hold authors?</think><sql>SELECT name FROM writers</sql>",
        "<think>The table is authors.</think><sql>SELECT author_id, name FROM authors LIMIT 3</sql>",
        f"<think>Join books to authors.</think><solution>{pair['sql']}</solution>",
    ]
    trajectory = _run(tokenizer, [rows[5]], replies)
    assert trajectory.reward == 1.0
    assert trajectory.metrics["correct"] == 1.0 and trajectory.metrics["format_ok"] == 1.0
    assert (trajectory.metrics["turns"], trajectory.metrics["probes"], trajectory.metrics["sql_errors"]) == (
        3.0,
        2.0,
        1.0,
    )
    assert trajectory.metrics["probe_failed"] == 1.0 and trajectory.metrics["recovered"] == 1.0
    text = tokenizer.decode(trajectory.completion_ids)
    assert "no such table: writers" in text
    assert "<reminder>You have 4 turns left to complete the task.</reminder>\n</observation>" in text
    assert "<reminder>You have 3 turns left to complete the task.</reminder>" in text


def test_five_turns_without_a_solution_is_bad_format(library_pair, tiny_model_dir):
    _, rows = library_pair
    tokenizer = load_tokenizer(tiny_model_dir)
    probe = "<think>Look again.</think><sql>SELECT COUNT(*) FROM books</sql>"
    trajectory = _run(tokenizer, [rows[5]], [probe] * 5)
    assert trajectory.reward == -1.0 and trajectory.metrics["turns"] == 5.0
    assert "your next reply must give the final <solution>" in tokenizer.decode(trajectory.completion_ids)


def test_one_turn_protocol_answers_at_once(library_pair, tiny_model_dir):
    pair, rows = library_pair
    tokenizer = load_tokenizer(tiny_model_dir)
    assert (
        _run(tokenizer, [rows[1]], [f"<think>Join.</think><solution>{pair['sql']}</solution>"]).reward == 1.0
    )
    # A probe is not allowed at 1 turn: the episode ends at once with -1, no observation.
    probed = _run(tokenizer, [rows[1]], ["<think>Look.</think><sql>SELECT * FROM authors</sql>"])
    assert probed.reward == -1.0 and probed.metrics["turns"] == 1.0
    assert "<observation>" not in tokenizer.decode(probed.completion_ids)
    # A wrong but well-formed answer is 0; an answer in a code fence only is -1, yet counted by
    # answer_correct (execution accuracy apart from the format).
    wrong = _run(tokenizer, [rows[1]], ["<think>Guess.</think><solution>SELECT title FROM books</solution>"])
    assert wrong.reward == 0.0
    fenced = _run(tokenizer, [rows[1]], [f"Here it is:\n```sql\n{pair['sql']}\n```"])
    assert fenced.reward == -1.0 and fenced.metrics["answer_correct"] == 1.0


def test_eval_is_summarised_per_eval_set(library_pair, tiny_model_dir):
    pair, rows = library_pair
    tokenizer = load_tokenizer(tiny_model_dir)
    five, one = copy.deepcopy(rows[5]), copy.deepcopy(rows[1])  # the fixture is shared by the module
    five.extras["eval_set"], one.extras["eval_set"] = "heldout_t5", "heldout_t1"
    one.index = 1
    replies = [f"<think>Join.</think><solution>{pair['sql']}</solution>"]
    engine = make_engine("scripted", tokenizer=tokenizer, replies=replies)
    metrics, _ = asyncio.run(
        evaluate(Generator(engine, tokenizer, limits=LIMITS), [five, one], n=1, sampling=SAMPLING, seed=0)
    )
    assert metrics["eval/heldout_t5/env/correct"] == 1.0 and metrics["eval/heldout_t1/env/correct"] == 1.0
    assert metrics["eval/heldout_t5/num_prompts"] == 1.0 and metrics["eval/num_prompts"] == 2.0
