"""Eval summaries: the unbiased pass@k for every k, and failed samples counted apart."""

from __future__ import annotations

import pytest

from aloft.trainer.evaluation import pass_at_k, summarize_groups
from aloft.types import RolloutStatus, Trajectory, TrajectoryGroup


def sample(reward: float, status: str = "stop", correct: float | None = None) -> Trajectory:
    return Trajectory(
        prompt_ids=[1],
        completion_ids=[2, 3],
        loss_mask=[1, 1],
        sampler_logprobs=[-0.1, -0.2],
        rewards=[0.0, reward],
        status=RolloutStatus(status),
        group_id="g",
        metrics={} if correct is None else {"correct": correct},
        info={"error": "env: OSError()", "error_source": "env"} if status == "env_error" else {},
    )


def test_pass_at_k_is_the_unbiased_estimator():
    # 1 right of 4: pass@k = 1 - C(3, k) / C(4, k)
    assert [pass_at_k(4, 1, k) for k in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)


def test_summaries_give_pass_at_every_k_and_leave_failed_samples_out_of_every_score():
    groups = [
        TrajectoryGroup(group_id="a", trajectories=[sample(1), sample(0), sample(0)]),
        TrajectoryGroup(group_id="b", trajectories=[sample(1), sample(1), sample(0, "env_error")]),
        TrajectoryGroup(group_id="c", trajectories=[sample(0, "env_error")] * 3),
    ]
    out = summarize_groups(groups)
    assert out["eval/num_prompts"] == 3
    assert out["eval/error_share"] == pytest.approx(4 / 9) and out["eval/error_share/engine"] == 0
    assert out["eval/reward/mean"] == pytest.approx(3 / 5)  # not 3 / 9: a failure is no reward
    assert out["eval/pass@1"] == pytest.approx((1 / 3 + 1) / 2)
    assert out["eval/pass@2"] == pytest.approx((2 / 3 + 1) / 2)
    assert out["eval/pass@3"] == 1.0  # only prompt a has 3 samples that ran
    assert "eval/pass@4" not in out


def test_success_is_the_envs_correct_metric_when_it_has_one():
    groups = [TrajectoryGroup(group_id="a", trajectories=[sample(1, correct=0.0), sample(-1, correct=1.0)])]
    out = summarize_groups(groups, prefix="eval/sql/")
    assert out["eval/sql/pass@1"] == 0.5 and out["eval/sql/env/correct"] == 0.5
    assert out["eval/sql/error_share"] == 0 and out["eval/sql/reward/mean"] == 0
