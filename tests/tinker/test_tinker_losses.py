"""Tinker's losses on hand-picked tokens: each a sum over tokens, numbers derived by hand."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("tinker", reason="the tinker extra is not installed: pip install 'aloft[tinker]'")

from aloft.tinker.errors import TinkerUserError
from aloft.tinker.losses import check_loss_inputs, token_loss

HALF, DOUBLE = math.log(0.5), math.log(2.0)


def loss_and_grad(name, current, config=None, **inputs):
    """The loss over one datum (a row of one) with the ``current`` logprobs, and its gradient in them."""
    lp = torch.tensor([current], requires_grad=True)
    tensors = {key: torch.tensor([value]) for key, value in inputs.items()}
    mask = torch.ones_like(lp, dtype=torch.bool)
    loss = token_loss(name)(lp, tensors, mask, config or {})
    loss.backward()
    return loss.item(), lp.grad[0].tolist()


def test_cross_entropy_sums_weighted_negative_logprobs_with_any_weights():
    # weights 1, 0.5 and -2 (forward_backward_custom sends gradients, negative ones included)
    loss, grad = loss_and_grad("cross_entropy", [-1.0, -2.0, -0.5], weights=[1.0, 0.5, -2.0])
    assert loss == pytest.approx(1.0 + 1.0 - 1.0)
    assert grad == pytest.approx([-1.0, -0.5, 2.0])


def test_importance_sampling_weights_the_advantage_by_the_sampling_ratio():
    # ratios 0.5 and 2 (sampling logprobs 0), advantages 2 and -1: -(0.5 * 2) - (2 * -1) = 1
    loss, grad = loss_and_grad(
        "importance_sampling", [HALF, DOUBLE], logprobs=[0.0, 0.0], advantages=[2.0, -1.0]
    )
    assert loss == pytest.approx(1.0)
    assert grad == pytest.approx([-1.0, 2.0])  # d(-r A)/d lp = -r A


def test_ppo_clips_the_ratio_at_tinker_s_thresholds():
    # r = 2 with A = 1: min(2, 1.2) = 1.2, no gradient; r = 0.5 with A = -1: -min(-0.5, -0.8) = 0.8.
    loss, grad = loss_and_grad("ppo", [DOUBLE, HALF], logprobs=[0.0, 0.0], advantages=[1.0, -1.0])
    assert loss == pytest.approx(-1.2 + 0.8)
    assert grad == pytest.approx([0.0, 0.0])
    # Inside the thresholds the token keeps its gradient: r = 0.5 under low = 0.4 gives -(-0.5) and -r A.
    loss, grad = loss_and_grad("ppo", [HALF], {"clip_low_threshold": 0.4}, logprobs=[0.0], advantages=[-1.0])
    assert loss == pytest.approx(0.5) and grad == pytest.approx([0.5])


@pytest.mark.parametrize(
    ("config", "weight"),
    [({}, 2.0), ({"clip_high_threshold": 1.2}, 1.2)],  # default: one-sided, capped at 4
)
def test_cispo_weights_logprobs_by_the_clipped_ratio_and_keeps_the_gradient(config, weight):
    loss, grad = loss_and_grad("cispo", [DOUBLE], config, logprobs=[0.0], advantages=[1.0])
    assert loss == pytest.approx(-weight * DOUBLE)
    assert grad == pytest.approx([-weight])


def test_a_missing_input_or_an_unknown_loss_is_named():
    with pytest.raises(
        TinkerUserError, match=r"loss 'ppo' needs loss_fn_inputs\['advantages'\]; datum 1 has"
    ):
        check_loss_inputs(
            "ppo", [{"target_tokens": 0, "logprobs": 0, "advantages": 0}, {"target_tokens": 0, "logprobs": 0}]
        )
    with pytest.raises(
        TinkerUserError, match="loss_fn 'dpo' is not served by aloft; choose one of: cross_entropy"
    ):
        check_loss_inputs("dpo", [])
    with pytest.raises(TinkerUserError, match="clip_low_threshold <= 1 <= clip_high_threshold"):
        loss_and_grad("ppo", [0.0], {"clip_high_threshold": 0.9}, logprobs=[0.0], advantages=[1.0])
