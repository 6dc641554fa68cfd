"""KL estimators (k1, k2, k3) and the KL reward penalty."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.algorithms import KL_ESTIMATORS, apply_kl_penalty_to_rewards, kl_divergence

# Policy prob 0.5, reference prob 0.25: log_ratio = log pi - log ref = ln 2 = 0.693147.
#   k1 = ln 2 = 0.693147
#   k2 = 0.5 * (ln 2)^2 = 0.240227
#   k3 = exp(-ln 2) + ln 2 - 1 = 0.5 + 0.693147 - 1 = 0.193147
LOGP = torch.tensor([[math.log(0.5)]])
REF = torch.tensor([[math.log(0.25)]])


@pytest.mark.parametrize(("estimator", "expected"), [("k1", 0.693147), ("k2", 0.240227), ("k3", 0.193147)])
def test_estimators_by_hand(estimator, expected):
    assert kl_divergence(LOGP, REF, estimator).item() == pytest.approx(expected, abs=1e-6)


def test_k1_and_k3_are_unbiased_for_the_true_kl():
    # pi = [0.7, 0.2, 0.1], ref = [0.4, 0.4, 0.2]: KL(pi || ref) = sum pi ln(pi / ref)
    #   = 0.7 ln 1.75 + 0.2 ln 0.5 + 0.1 ln 0.5 = 0.391734 - 0.138629 - 0.069315 = 0.183790.
    pi, ref = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    samples = torch.multinomial(pi, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    logp, ref_logp = pi.log()[samples].view(1, -1), ref.log()[samples].view(1, -1)
    for estimator in ("k1", "k3"):
        assert kl_divergence(logp, ref_logp, estimator).mean().item() == pytest.approx(0.183790, abs=5e-3)


@settings(max_examples=50, deadline=None)
@given(
    logp=st.floats(-30, 0, allow_nan=False, width=32),
    ref=st.floats(-30, 0, allow_nan=False, width=32),
)
def test_k2_k3_are_non_negative_and_all_vanish_at_equality(logp, ref):
    logp_t, ref_t = torch.tensor([[logp]]), torch.tensor([[ref]])
    assert kl_divergence(logp_t, ref_t, "k2").item() >= 0
    assert kl_divergence(logp_t, ref_t, "k3").item() >= 0
    for estimator in KL_ESTIMATORS:
        assert kl_divergence(logp_t, logp_t, estimator).item() == 0.0


def test_k3_is_not_negative_where_float32_rounding_made_it_so():
    """exp(r) - r - 1 rounds to -5.96e-08 for log ratios near 0 (179 of these 200,000 pairs, the first
    one below among them); k3 is a KL estimate and must never be negative."""
    generator = torch.Generator().manual_seed(0)
    logp = -30 * torch.rand(200_000, generator=generator)
    ref = logp + (torch.rand(200_000, generator=generator) - 0.5) * 1e-5
    logp = torch.cat([torch.tensor([-0.03708064556121826]), logp])[None, :]
    ref = torch.cat([torch.tensor([-0.0370766706764698]), ref])[None, :]
    k3 = kl_divergence(logp, ref, "k3")
    assert (k3 >= 0).all(), k3.min()


def test_k3_stays_finite_for_extreme_log_ratios():
    # ref - logp = 1000 would overflow exp; the log ratio is clamped to 20: e^20 - 20 - 1.
    kl = kl_divergence(torch.tensor([[-1000.0, 0.0]]), torch.tensor([[0.0, -1000.0]]), "k3")
    assert torch.isfinite(kl).all()
    assert kl[0, 0].item() == pytest.approx(math.exp(20) - 21, rel=1e-6)
    assert kl[0, 1].item() == pytest.approx(math.exp(-20) + 20 - 1, rel=1e-6)


def test_k3_gradient_pulls_towards_the_reference():
    # d k3 / d logp = 1 - exp(ref - logp) = 1 - 0.5 = 0.5 > 0: lowering logp lowers the KL.
    logp = LOGP.clone().requires_grad_()
    kl_divergence(logp, REF, "k3").sum().backward()
    assert logp.grad.item() == pytest.approx(0.5)


def test_unknown_estimator_lists_the_choices():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_divergence(LOGP, REF, "k4")


def test_reward_penalty_on_every_policy_token_only():
    # Policy tokens at 0 and 2 (k1 = ln 2 each), an env token at 1. coef 0.1:
    # rewards [0, 5, 1] -> [-0.0693147, 5, 1 - 0.0693147]; the input is not modified.
    rewards = torch.tensor([[0.0, 5.0, 1.0]])
    logp = torch.full((1, 3), math.log(0.5))
    ref = torch.full((1, 3), math.log(0.25))
    new = apply_kl_penalty_to_rewards(rewards, logp, ref, torch.tensor([[1, 0, 1]]), 0.1, "k1")
    torch.testing.assert_close(new, torch.tensor([[-0.0693147, 5.0, 0.9306853]]))
    assert torch.equal(rewards, torch.tensor([[0.0, 5.0, 1.0]]))
    assert not new.requires_grad
