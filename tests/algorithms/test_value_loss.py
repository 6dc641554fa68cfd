"""The critic's clipped value loss."""

from __future__ import annotations

import pytest
import torch

from aloft.algorithms import LossNormalizer, clipped_value_loss


def test_clipped_value_loss_by_hand():
    # clip 0.2, token_mean over 3 policy tokens (the 4th is padding holding garbage):
    #   t0: V=1.5, V_old=1.0, R=2.0: V_clip=1.2; (V-R)^2=0.25 < (V_clip-R)^2=0.64 -> 0.5*0.64=0.32, clipped,
    #       gradient 0 (V_clip is saturated)
    #   t1: V=0.9, V_old=1.0, R=1.0: inside the clip range; 0.5*0.01 = 0.005; d/dV = V - R = -0.1
    #   t2: V=1.5, V_old=1.0, R=1.0: V_clip=1.2; 0.25 > 0.04 -> 0.5*0.25 = 0.125; d/dV = 0.5
    # loss = (0.32 + 0.005 + 0.125) / 3 = 0.15; gradient [0, -0.1, 0.5, 0] / 3.
    values = torch.tensor([[1.5, 0.9, 1.5, 1e6]], requires_grad=True)
    old_values = torch.tensor([[1.0, 1.0, 1.0, float("nan")]])
    returns = torch.tensor([[2.0, 1.0, 1.0, float("inf")]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, metrics = clipped_value_loss(values, old_values, returns, mask, clip=0.2)
    assert loss.item() == pytest.approx(0.15, abs=1e-6)
    (grad,) = torch.autograd.grad(loss, values)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.1 / 3, 0.5 / 3, 0.0]]))
    assert metrics["vf_clip_frac"] == pytest.approx(1 / 3)
    assert metrics["value_mean"] == pytest.approx(1.3, abs=1e-6)


def test_value_loss_uses_the_normalizer_and_mode():
    # One token with 0.5 * (2 - 0)^2 = 2 (old value 2 -> not clipped). With a normalizer for a
    # mini-batch of 4 tokens: 2 / 4 = 0.5. seq_mean_token_sum_norm with max_len 8, 1 sequence: 2 / 8.
    values, old, returns, mask = (
        torch.tensor([[2.0]]),
        torch.tensor([[2.0]]),
        torch.tensor([[0.0]]),
        torch.ones(1, 1),
    )
    normalizer = LossNormalizer(num_tokens=4, num_sequences=1, max_len=8)
    loss, _ = clipped_value_loss(values, old, returns, mask, 0.2, normalizer)
    assert loss.item() == pytest.approx(0.5)
    loss, _ = clipped_value_loss(values, old, returns, mask, 0.2, normalizer, mode="seq_mean_token_sum_norm")
    assert loss.item() == pytest.approx(0.25)
