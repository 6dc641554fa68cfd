"""The SkyRL-SQL experiment's evals: fixed question sets, greedy, one outcome record per question.

Each eval set is a file of rows asked at a fixed number of turns (``EVAL_SETS``): every held-out
question (databases never seen in training) at 5 turns and at 1 turn, every in-domain eval
question (other questions on the training databases) at 5 turns, and the learning-rate study's
fixed 32 in-domain questions at 1 turn. ``evaluate_model`` runs one model on one set and writes,
per question, an outcome record (``OUTCOME_FIELDS``): which question and database, which model and
protocol, and whether it was right (``correct``: right rows in a well-formed ``<solution>``),
well formed (``format_ok``) and right whatever the format (``answer_correct``). The paired
statistics (``aloft.experiments.sql_stats``) are computed from these records alone.

Evals run in chunks of ``CHUNK_ROWS`` questions, each written atomically as it finishes, so a
session that stops mid-eval loses at most one chunk and the next run picks up where it stopped.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aloft.atomic_files import write_text_atomically
from aloft.data import build_dataset, read_rows, write_rows

__all__ = [
    "CHUNK_ROWS",
    "EVAL_SETS",
    "OUTCOME_FIELDS",
    "EvalSet",
    "evaluate_model",
    "read_outcomes",
    "write_eval_sets",
]

CHUNK_ROWS = 64
"""Questions per eval chunk (one model load and one atomic write each)."""


@dataclass(frozen=True)
class EvalSet:
    """A fixed question set: ``split`` of the ``sql`` builder asked at ``turns`` turns; ``size``
    questions drawn with a fixed seed (0: every question of the split)."""

    split: str
    turns: int
    size: int = 0


EVAL_SETS: dict[str, EvalSet] = {
    "heldout_t5": EvalSet("heldout", 5),
    "heldout_t1": EvalSet("heldout", 1),
    "indomain_t5": EvalSet("eval", 5),
    "study_t1": EvalSet("eval", 1, size=32),
}
"""Eval set name -> its questions and turns. The first three are the start/end evals (154 held-out
questions twice, 139 in-domain); ``study_t1`` is the learning-rate study's fixed in-domain set."""

OUTCOME_FIELDS = (
    "question_id",
    "db_id",
    "model",
    "protocol",
    "correct",
    "format_ok",
    "answer_correct",
)
"""Every outcome record has these fields (and a few more: reward, turns, probes, failed)."""

QUICK_SIZE = 3
"""Questions per eval set under ``--quick`` (tests and smoke checks)."""


def write_eval_sets(data_dir: Path, *, hint: bool, quick: bool = False) -> dict[str, Path]:
    """Write every ``EVAL_SETS`` file under ``data_dir`` (``eval_<name>.jsonl``); returns the paths."""
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, spec in EVAL_SETS.items():
        rows = build_dataset("sql", n=0, seed=0, split=spec.split, max_turns=spec.turns, hint=hint)
        size = QUICK_SIZE if quick else spec.size
        if size:  # the same questions at every run of the experiment
            rows = random.Random(1234).sample(rows, min(size, len(rows)))
        paths[name] = data_dir / f"eval_{name}.jsonl"
        write_rows(paths[name], [{**row, "eval_set": name} for row in rows])
    return paths


def evaluate_model(
    model: str,
    model_name: str,
    set_name: str,
    rows_path: Path,
    out_dir: Path,
    settings: Any,
    echo: Any = print,
) -> list[dict[str, Any]]:
    """Evaluate ``model`` (a model dir, run dir or checkpoint, as ``aloft eval`` takes) greedily on
    the rows of ``rows_path``; returns one outcome record per question, in row order.

    Chunks already written under ``out_dir/<model_name>/<set_name>/`` are kept (resume); each new
    chunk writes its outcomes (``chunk_<first row>.jsonl``) and its trajectories
    (``chunk_<first row>.rollouts.jsonl``). ``settings``: ``aloft.trainer.eval_command.EvalSettings``
    (one sample, temperature 0)."""
    from aloft.trainer.eval_command import resolve_eval_source, run_eval, write_eval_rollouts

    rows = read_rows(rows_path)
    where = out_dir / model_name / set_name
    where.mkdir(parents=True, exist_ok=True)
    turns = EVAL_SETS[set_name].turns if set_name in EVAL_SETS else None
    for start in range(0, len(rows), CHUNK_ROWS):
        path = where / f"chunk_{start:04d}.jsonl"
        if path.exists():
            continue
        chunk = rows[start : start + CHUNK_ROWS]
        echo(
            f"[skyrl-sql] eval {model_name} on {set_name}: questions {start + 1}-{start + len(chunk)} of {len(rows)}"
        )
        _, groups, tokenizer = run_eval(resolve_eval_source(model), chunk, settings)
        by_index = {row.index: row for row in chunk}
        records = [
            outcome_record(t, by_index[t.info["row_index"]], model_name, set_name, turns)
            for group in groups
            for t in group.trajectories
        ]
        rollouts = where / f"chunk_{start:04d}.rollouts.jsonl"
        write_eval_rollouts(rollouts, groups, tokenizer)
        write_text_atomically(path, "".join(json.dumps(r) + "\n" for r in records))
    return read_outcomes(where)


def outcome_record(
    trajectory: Any, row: Any, model_name: str, set_name: str, turns: int | None
) -> dict[str, Any]:
    """One question's outcome (``OUTCOME_FIELDS`` and the episode's shape) from its trajectory."""
    metrics = trajectory.metrics
    return {
        "question_id": row.extra_info.get("pair_id", f"row{row.index}"),
        "db_id": row.extras.get("db_id"),
        "model": model_name,
        "protocol": set_name,
        "turns_allowed": turns,
        "correct": bool(metrics.get("correct", 0.0) > 0) and not trajectory.failed,
        "format_ok": bool(metrics.get("format_ok", 0.0) > 0),
        "answer_correct": bool(metrics.get("answer_correct", 0.0) > 0),
        "reward": trajectory.reward,
        "turns": metrics.get("turns"),
        "probes": metrics.get("probes"),
        "probe_failed": bool(metrics.get("probe_failed", 0.0) > 0),
        "recovered": bool(metrics.get("recovered", 0.0) > 0),
        "failed": trajectory.failed,
    }


def read_outcomes(where: Path) -> list[dict[str, Any]]:
    """The outcome records of every chunk under ``where``, in question order."""
    records = []
    for path in sorted(where.glob("chunk_*.jsonl")):
        if path.name.endswith(".rollouts.jsonl"):
            continue
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records
