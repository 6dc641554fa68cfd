"""The SkyRL-SQL experiment's start/end table, recomputed from the per-question outcome records.

``python -m aloft.experiments.sql_stats OUTCOMES.json`` prints it (markdown) from the records that
``aloft.experiments.sql_evals`` writes (a JSON list, or JSON lines): per eval set, each model's
execution accuracy, format rate and any-format accuracy; then the paired comparisons over the same
questions (``aloft.trainer.paired.compare``: the gain in questions solved, its 95% BCa bootstrap CI,
the exact McNemar p), each trained policy against the warm start and the multi-turn policy against
the single-turn one.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from aloft.trainer.paired import PairedComparison, compare

__all__ = [
    "BASELINE",
    "compare_outcomes",
    "comparisons",
    "load_outcomes",
    "main",
    "solved_by_question",
    "stats_table",
]

BASELINE = "warm_start"
"""The model every trained policy started from."""


def load_outcomes(path: Path) -> list[dict[str, Any]]:
    """Outcome records from a JSON list or a JSON-lines file."""
    text = path.read_text()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def solved_by_question(records: list[dict[str, Any]]) -> dict[str, bool | None]:
    """Question id -> correct (None where the episode failed), from one model's records on one set."""
    return {r["question_id"]: (None if r.get("failed") else bool(r["correct"])) for r in records}


def compare_outcomes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> PairedComparison | None:
    """The paired comparison of two models' records on the same questions (``aloft.trainer.paired``);
    None while they do not cover the same questions (one side not finished)."""
    solved_a, solved_b = solved_by_question(a), solved_by_question(b)
    if not solved_a or set(solved_a) != set(solved_b):
        return None
    index = {question: i for i, question in enumerate(sorted(solved_a))}
    result, _ = compare(
        {index[q]: v for q, v in solved_a.items()}, {index[q]: v for q, v in solved_b.items()}
    )
    return result


def comparisons(records: list[dict[str, Any]]) -> list[tuple[str, str, str, PairedComparison]]:
    """``(protocol, a, b, result)`` for every paired comparison the records allow: each model
    against ``BASELINE``, and ``multi_turn*`` against the ``single_turn*`` of the same seed suffix."""
    by_protocol: dict[str, set[str]] = defaultdict(set)
    for r in records:
        by_protocol[r["protocol"]].add(r["model"])
    out = []
    for protocol, models in by_protocol.items():
        pairs = [(BASELINE, m) for m in sorted(models) if m != BASELINE and BASELINE in models]
        pairs += [
            (m.replace("multi_turn", "single_turn"), m)
            for m in sorted(models)
            if m.startswith("multi_turn") and m.replace("multi_turn", "single_turn") in models
        ]
        for a, b in pairs:
            side_a, side_b = (
                [r for r in records if (r["model"], r["protocol"]) == (m, protocol)] for m in (a, b)
            )
            if (result := compare_outcomes(side_a, side_b)) is not None:
                out.append((protocol, a, b, result))
    return out


def stats_table(records: list[dict[str, Any]]) -> str:
    """The markdown tables: accuracies per model and eval set, then the paired comparisons."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        cells[(r["protocol"], r["model"])].append(r)
    lines = [
        "| eval set | model | questions | correct | format | any-format |",
        "|---|---|---|---|---|---|",
    ]
    for (protocol, model), rows in sorted(cells.items()):
        n = len(rows)
        share = {key: sum(bool(r[key]) for r in rows) for key in ("correct", "format_ok", "answer_correct")}
        lines.append(
            f"| {protocol} | {model} | {n} | {share['correct']} ({share['correct'] / n:.3f}) "
            f"| {share['format_ok'] / n:.3f} | {share['answer_correct'] / n:.3f} |"
        )
    lines += [
        "",
        "| eval set | b vs a | questions | a right | b right | only a | only b | gain (b - a) | 95% CI | McNemar p |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for protocol, a, b, c in comparisons(records):
        lines.append(
            f"| {protocol} | {b} vs {a} | {c.items} | {c.a_solved} | {c.b_solved} | {c.only_a} | {c.only_b} "
            f"| {c.gain:+.3f} | {c.ci_low:+.3f} to {c.ci_high:+.3f} | {c.p_value:.3g} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aloft.experiments.sql_stats",
        description="the SkyRL-SQL start/end eval table from per-question outcome records",
    )
    parser.add_argument("outcomes", type=Path, help="outcome records (JSON list or JSON lines)")
    args = parser.parse_args(argv)
    print(stats_table(load_outcomes(args.outcomes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
