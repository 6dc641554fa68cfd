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
    with pytest.raises(TinkerUserError, match="use 'importance_sampling', 'ppo' or 'cispo'"):
        check_loss_inputs("stable_reinforce", [])
    with pytest.raises(TinkerUserError, match="clip_low_threshold <= 1 <= clip_high_threshold"):
        loss_and_grad("ppo", [0.0], {"clip_high_threshold": 0.9}, logprobs=[0.0], advantages=[1.0])


def test_dro_is_the_advantage_term_minus_a_quadratic_penalty_and_needs_beta():
    # lp = log 0.5, sampling 0, A = 2, beta = 0.5: loss = -(2 log 0.5 - 0.25 log(0.5)^2),
    # gradient -A + beta (lp - q) = -2 + 0.5 log 0.5.
    loss, grad = loss_and_grad("dro", [HALF], {"beta": 0.5}, logprobs=[0.0], advantages=[2.0])
    assert loss == pytest.approx(-(2 * HALF - 0.25 * HALF**2))
    assert grad == pytest.approx([-2.0 + 0.5 * HALF])
    with pytest.raises(TinkerUserError, match=r"loss 'dro' needs loss_fn_config\['beta'\]"):
        loss_and_grad("dro", [HALF], logprobs=[0.0], advantages=[2.0])


def test_gspo_gives_every_token_the_sequence_ratio_with_its_own_gradient():
    # Ratios 2 and 0.5: their geometric mean is 1, inside the clip, so each token's loss is -A and
    # its gradient -A (the ratio's value, 1, times A).
    loss, grad = loss_and_grad(
        "gspo", [DOUBLE, HALF], logprobs=[0.0, 0.0], advantages=[1.0, 3.0], sequence_ratio_mask=[1.0, 1.0]
    )
    assert loss == pytest.approx(-4.0) and grad == pytest.approx([-1.0, -3.0])
    # Ratios 2 and 2: the sequence ratio 2 is clipped at 1 + 4e-4 (the GSPO paper's epsilon): no gradient.
    loss, grad = loss_and_grad(
        "gspo", [DOUBLE, DOUBLE], logprobs=[0.0, 0.0], advantages=[1.0, 1.0], sequence_ratio_mask=[1.0, 1.0]
    )
    assert loss == pytest.approx(-2 * 1.0004) and grad == pytest.approx([0.0, 0.0])
    # Only the masked token sets the ratio (here 4 -> clipped); the unmasked one still carries it.
    loss, _ = loss_and_grad(
        "gspo", [math.log(4.0), HALF], {"clip_high_threshold": 10.0}, logprobs=[0.0, 0.0], advantages=[1.0, 1.0],
        sequence_ratio_mask=[1.0, 0.0],
    )  # fmt: skip
    assert loss == pytest.approx(-8.0)
