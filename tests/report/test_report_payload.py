"""The page's data without a browser: what a run's files become in the payload the page draws."""

from __future__ import annotations

import base64
import gzip
import json

from aloft.report.page import encode_payload, report_payload
from aloft.report.runs import load_run


def _decoded(payload: dict) -> dict:
    """What the page's script gets: the payload through gzip + base64 and back, as JSON.parse reads it."""
    return json.loads(gzip.decompress(base64.b64decode(encode_payload(payload))))


def test_non_finite_metrics_and_multi_turn_trajectories_reach_the_page_as_written(tmp_path):
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    # Python's json writes NaN/Infinity for a non-finite metric; the page gets a gap (null) there.
    rows = [
        {"step": 1, "time": 100.0, "reward/mean": 0.5, "policy/loss": float("nan")},
        {"step": 2, "time": 160.0, "reward/mean": 0.75, "policy/loss": float("inf")},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    # Two policy turns around an observation, and a third of one token; rewards on turn ends.
    record = {
        "group_id": "g0",
        "status": "ok",
        "reward": 1.25,
        "prompt": "p",
        "completion_ids": [5, 6, 7, 8, 9, 10, 11],
        "loss_mask": [1, 1, 0, 0, 1, 0, 1],
        "rewards": [0.0, 0.25, 0.0, 0.0, 0.5, 0.0, 0.5],
        "sampler_logprobs": [-0.123456, -1.0, 0.0, 0.0, -2.00004, 0.0, -0.5],
        "trainer_logprobs": [-0.12346, -1.0, 0.0, 0.0, -2.0001, 0.0, -0.5],
    }
    (run / "rollouts" / "step_2.jsonl").write_text(json.dumps(record) + "\n")
    page = _decoded(report_payload([load_run(run)], samples_per_step=32))

    (shown,) = page["runs"]
    assert shown["steps"]["reward/mean"] == [0.5, 0.75]
    assert shown["steps"]["policy/loss"] == [None, None]
    assert shown["steps"]["minutes"] == [0.0, 1.0]
    (trajectory,) = shown["trajectories"]["2"]
    assert trajectory["ids"] == record["completion_ids"]
    assert trajectory["mask"] == "1100101"
    assert trajectory["lp"] == [-0.1235, -1.0, 0.0, 0.0, -2.0, 0.0, -0.5]
    assert trajectory["tlp_diff"] == [0.0, 0.0, 0.0, 0.0, -0.0001, 0.0, 0.0]
    assert trajectory["turn_rewards"] == [0.25, 0.5, 0.5]
    assert shown["tokens"] == {str(i): f"⟨{i}⟩" for i in range(5, 12)}  # no model: ids shown
