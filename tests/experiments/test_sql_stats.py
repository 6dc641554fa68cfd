"""The SkyRL-SQL experiment's statistics, from hand-made outcome records: the start/end table's
paired comparisons (``sql_stats``) and the learning-rate study's table (``sql_study``)."""

from __future__ import annotations

import json

import pytest

from aloft.experiments.sql_stats import comparisons, main, stats_table
from aloft.experiments.sql_study import study_table, training_trend


def _records(model: str, protocol: str, right: list[int], n: int = 10) -> list[dict]:
    return [
        {
            "question_id": f"q{i}",
            "db_id": "flights",
            "model": model,
            "protocol": protocol,
            "correct": i in right,
            "format_ok": True,
            "answer_correct": i in right,
            "failed": False,
        }
        for i in range(n)
    ]


def test_each_policy_against_the_warm_start_and_multi_against_single(tmp_path, capsys):
    # Warm start right on q0-q2. The multi-turn policy on q1-q6: it alone solves q3-q6 (4), the
    # warm start alone q0 (1): gain (4 - 1) / 10, exact McNemar p = P(X<=1 or X>=4 | 5, 1/2) = 12/32.
    records = (
        _records("warm_start", "heldout_t5", [0, 1, 2])
        + _records("multi_turn-seed0", "heldout_t5", [1, 2, 3, 4, 5, 6])
        + _records("single_turn-seed0", "heldout_t5", [0, 1, 2])
    )
    found = {(a, b): c for protocol, a, b, c in comparisons(records)}
    multi = found[("warm_start", "multi_turn-seed0")]
    assert (multi.only_a, multi.only_b, multi.items) == (1, 4, 10)
    assert multi.gain == pytest.approx(0.3) and multi.p_value == pytest.approx(12 / 32)
    assert multi.ci_low < 0.3 < multi.ci_high
    single = found[("warm_start", "single_turn-seed0")]
    assert (single.gain, single.p_value, single.ci_low, single.ci_high) == (0.0, 1.0, 0.0, 0.0)
    assert found[("single_turn-seed0", "multi_turn-seed0")].gain == pytest.approx(0.3)
    path = tmp_path / "outcomes.json"
    path.write_text(json.dumps(records))
    assert main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == stats_table(records)
    assert "| heldout_t5 | multi_turn-seed0 | 10 | 6 (0.600) | 1.000 | 0.600 |" in printed
    assert "| heldout_t5 | multi_turn-seed0 vs warm_start | 10 | 3 | 6 | 1 | 4 | +0.300 |" in printed


def test_a_side_not_finished_is_not_paired_and_failed_episodes_are_left_out():
    records = _records("warm_start", "indomain_t5", [0]) + _records(
        "multi_turn-seed0", "indomain_t5", [0, 1], n=5
    )
    assert comparisons(records) == []  # 10 questions against 5: no pairing yet
    records = _records("warm_start", "indomain_t5", [0], n=4) + _records(
        "multi_turn-seed0", "indomain_t5", [0, 1], n=4
    )
    records[-1]["failed"] = True  # q3 failed on one side: out of both
    ((_, _, _, result),) = comparisons(records)
    assert (result.items, result.excluded, result.only_b) == (3, 1, 1)


def _steps(rewards: list[float], kl: float) -> list[dict]:
    return [
        {
            "step": k + 1,
            "reward/mean": r,
            "env/answer_correct": (r + 1) / 2,
            "env/format_ok": 1.0,
            "policy/update_kl": kl,
            "policy/update_rel_norm": 10 * kl,
        }
        for k, r in enumerate(rewards)
    ]


def test_the_study_table_trends_and_gaps():
    low = _steps([0.0, 0.2, 0.0, 0.2], kl=1e-4)
    high = _steps([0.0, 0.4, 0.4, 0.6], kl=1e-2)
    trend = training_trend(high)
    assert (trend["reward_first"], trend["reward_last"]) == (pytest.approx(0.2), pytest.approx(0.5))
    assert trend["reward_slope"] == pytest.approx(0.18) and trend["update_kl"] == pytest.approx(1e-2)
    base = _records("warm_start", "study_t1", [0, 1], n=8)
    outcomes = {
        "lr3e-5_r16": _records("lr3e-5_r16", "study_t1", [0, 1], n=8),
        "lr3e-4_r16": _records("lr3e-4_r16", "study_t1", [0, 1, 2, 3, 4], n=8),
    }
    table = study_table({"lr3e-5_r16": low, "lr3e-4_r16": high}, outcomes, base)
    assert table.startswith("Warm start on the study eval: 2 of 8 right.")
    row = next(line for line in table.splitlines() if line.startswith("| lr3e-4_r16 |"))
    # last half vs the first run on the same steps: (0.4 - 0.0 + 0.6 - 0.2) / 2 = +0.40
    assert "| +0.40 |" in row and "| 5 of 8 | +0.375 (" in row
    assert "| 1.00e-02 | 1.00e-01 |" in row
