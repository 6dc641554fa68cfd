"""Forked agent sessions count once in their group's statistics (aloft.trainer.sessions)."""

from __future__ import annotations

import pytest
import torch

from aloft.algorithms import get_advantage_estimator
from aloft.config import load_config
from aloft.trainer.sessions import session_leads, shared_session_advantages
from aloft.training.batch import collate
from aloft.types import Trajectory


def piece(session: str | None, reward: float, fork: int = 0, forks: int = 0, length: int = 3) -> Trajectory:
    rewards = [0.0] * (length - 1) + [reward]
    info = {} if session is None else {"session": session, "fork": fork, "forks": forks}
    return Trajectory(
        prompt_ids=[1, 2],
        completion_ids=[5] * length,
        loss_mask=[1] * length,
        sampler_logprobs=[0.0] * length,
        rewards=rewards,
        status="stop",
        group_id="g",
        info=info,
    )


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_a_forked_session_weighs_one_sample_in_its_group(estimator):
    algo = load_config("quickstart", [f"algorithm.advantage={estimator}"]).algorithm
    forked = [piece("a", 1.0, 0, 1, length=2), piece("a", 1.0, 1, 1), piece("b", 0.0), piece(None, 0.5)]
    whole = [piece("a", 1.0), piece("b", 0.0), piece(None, 0.5)]
    fn = get_advantage_estimator(estimator)
    batch, reference = collate(forked, 0, {"g": 0}), collate(whole, 0, {"g": 0})
    leads = session_leads(forked)
    assert leads == [1, 1, 2, 3]
    got = shared_session_advantages(fn, batch.rewards, batch.loss_mask, batch.group_ids, algo, leads)
    want, _ = fn(reference.rewards, reference.loss_mask, reference.group_ids, None, algo)
    # Both pieces of session a get a's advantage from the three-sample group, on their own tokens.
    assert torch.equal(got[0, :2], want[0, :2]) and torch.equal(got[1, :3], want[0, :3])
    assert torch.equal(got[2:, :3], want[1:, :3])
    assert float(got[0, 2]) == 0.0  # a padding position of the shorter piece
    counted_twice, _ = fn(batch.rewards, batch.loss_mask, batch.group_ids, None, algo)
    assert not torch.allclose(counted_twice[2, :3], want[1, :3])  # what counting pieces as samples gives


def test_no_fork_no_change():
    assert session_leads([piece("a", 1.0), piece(None, 0.0)]) is None
