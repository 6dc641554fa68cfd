"""Off-policy corrections: the weights each mode gives, and that weighting advantages weights the loss."""

from __future__ import annotations

import math

import pytest
import torch

from aloft.algorithms import get_policy_loss, off_policy_weights

# Two sequences: 3 policy tokens, then 2 (the last position is padding).
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
SAMPLER = torch.log(torch.tensor([[0.5, 0.2, 0.4], [0.3, 0.3, 0.9]]))
PROXIMAL = torch.log(torch.tensor([[0.5, 0.8, 0.2], [0.33, 0.3, 0.1]]))  # ratios 1, 4, 0.5 | 1.1, 1


def test_token_level_tis_truncates_each_ratio():
    weights, metrics = off_policy_weights(PROXIMAL, SAMPLER, MASK, "tis_token", cap=2.0)
    expected = torch.tensor([[1.0, 2.0, 0.5], [1.1, 1.0, 0.0]])
    torch.testing.assert_close(weights, expected)
    assert metrics["off_policy/truncated_share"] == pytest.approx(1 / 5)
    assert metrics["off_policy/mean_weight"] == pytest.approx(float(expected.sum()) / 5)


def test_sequence_level_tis_uses_the_product_over_the_sequence():
    weights, metrics = off_policy_weights(PROXIMAL, SAMPLER, MASK, "tis_sequence", cap=2.0)
    # Sequence 1: 1 * 4 * 0.5 = 2 (at the cap); sequence 2: 1.1 * 1 = 1.1; padding stays 0.
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0, 2.0], [1.1, 1.1, 0.0]]))
    assert metrics["off_policy/truncated_share"] == 0.0


def test_geometric_masking_leaves_out_sequences_outside_the_band():
    weights, metrics = off_policy_weights(PROXIMAL, SAMPLER, MASK, "geo_mask", low=0.9, high=1.1)
    # Geometric means: (1 * 4 * 0.5) ** (1/3) = 1.26 (out), (1.1 * 1) ** (1/2) = 1.049 (in).
    assert math.isclose(2 ** (1 / 3), 1.26, abs_tol=0.01)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    assert metrics["off_policy/masked_share"] == 0.5


def test_none_is_the_mask_and_unknown_modes_are_refused():
    weights, _ = off_policy_weights(PROXIMAL, SAMPLER, MASK, "none")
    torch.testing.assert_close(weights, MASK)
    with pytest.raises(ValueError, match="tis_token"):
        off_policy_weights(PROXIMAL, SAMPLER, MASK, "tis")


@pytest.mark.parametrize("loss_name", ["ppo", "dual_clip", "cispo", "gspo"])
def test_weighting_advantages_weights_each_tokens_loss(loss_name, make_config):
    """Every built-in loss scales with a nonnegative per-sequence weight on the advantage, so a
    correction on the advantages is importance weighting of the loss."""
    config = make_config(loss_reduction="token_mean")
    loss_fn = get_policy_loss(loss_name)
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]])
    old = PROXIMAL.clone()
    weights, _ = off_policy_weights(PROXIMAL, SAMPLER, MASK, "tis_sequence", cap=2.0)

    def per_sequence_losses(adv):
        losses = []
        for row in range(2):
            logprobs = (PROXIMAL + 0.05).clone().requires_grad_(True)
            only = MASK.clone()
            only[1 - row] = 0
            loss, _ = loss_fn(logprobs, old, adv, only, config, SAMPLER)
            losses.append(loss)
        return losses

    plain, weighted = per_sequence_losses(advantages), per_sequence_losses(advantages * weights)
    for row, (a, b) in enumerate(zip(plain, weighted)):
        assert float(b.detach()) == pytest.approx(
            float(a.detach()) * float(weights[row, 0]), rel=1e-5, abs=1e-7
        )
