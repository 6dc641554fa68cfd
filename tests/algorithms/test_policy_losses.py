"""Policy losses: hand-derived values and gradients, and invariants every loss must satisfy."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.algorithms import LOSS_REDUCTIONS, LossNormalizer, get_policy_loss, policy_losses

BUILTIN_LOSSES = ["ppo", "dual_clip", "gspo", "cispo"]
OLD_LOGPROB = math.log(0.5)


def tokens_with_ratios(ratios, advantages, mask=None):
    """One row of ``logprobs`` (a leaf) whose ratios to ``old_logprobs`` = log 0.5 are ``ratios``."""
    old = torch.full((1, len(ratios)), OLD_LOGPROB)
    logprobs = (old + torch.log(torch.tensor([ratios]))).requires_grad_()
    mask = torch.ones(1, len(ratios)) if mask is None else torch.tensor([mask])
    return logprobs, old, torch.tensor([advantages], dtype=torch.float32), mask


def loss_and_grad(name, config, logprobs, old, advantages, mask, **kwargs):
    loss, metrics = get_policy_loss(name)(logprobs, old, advantages, mask, config, **kwargs)
    (grad,) = torch.autograd.grad(loss, logprobs)
    return loss, grad, metrics


def test_every_builtin_loss_is_registered():
    assert set(BUILTIN_LOSSES) <= set(policy_losses)


# --- PPO -----------------------------------------------------------------------------------------


def test_ppo_clips_on_both_sides(make_config):
    # clip_low 0.2, clip_high 0.28 -> ratios are clipped to [0.8, 1.28].
    #   token 0: A=+1, r=1.5: max(-1.5, -1.28) = -1.28  clipped (gradient 0)
    #   token 1: A=-1, r=0.5: max( 0.5,  0.8 ) =  0.8   clipped (gradient 0)
    #   token 2: A=+1, r=0.5: max(-0.5, -0.8 ) = -0.5   d/dlogp (-A r) = -0.5
    #   token 3: A=-1, r=1.5: max( 1.5,  1.28) =  1.5   d/dlogp (-A r) = +1.5
    # token_mean: (-1.28 + 0.8 - 0.5 + 1.5) / 4 = 0.13; gradient [0, 0, -0.5, 1.5] / 4.
    config = make_config(clip_low=0.2, clip_high=0.28)
    loss, grad, metrics = loss_and_grad(
        "ppo", config, *tokens_with_ratios([1.5, 0.5, 0.5, 1.5], [1, -1, 1, -1])
    )
    assert loss.item() == pytest.approx(0.13, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, -0.125, 0.375]]))
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    # approx_kl = mean(old - new) = -(2 ln 1.5 + 2 ln 0.5) / 4 = -0.5 ln 0.75 = 0.143841
    assert metrics["approx_kl"] == pytest.approx(0.143841, abs=1e-5)


def test_ppo_clip_high_is_separate_from_clip_low(make_config):
    # A=+1, r=1.25: with clip_high 0.28 (DAPO clip-higher) 1.25 < 1.28 is not clipped -> loss -1.25 with
    # gradient -1; with the symmetric 0.2 it is clipped at 1.2 -> loss -1.2, gradient 0.
    loss, grad, metrics = loss_and_grad(
        "ppo", make_config(clip_high=0.28), *tokens_with_ratios([1.25], [1.0])
    )
    assert (loss.item(), grad.item(), metrics["clip_frac"]) == pytest.approx((-1.25, -1.25, 0.0))
    loss, grad, metrics = loss_and_grad("ppo", make_config(clip_high=0.2), *tokens_with_ratios([1.25], [1.0]))
    assert (loss.item(), grad.item(), metrics["clip_frac"]) == pytest.approx((-1.2, 0.0, 1.0))


def test_ppo_uses_the_configured_reduction(make_config):
    # Row 0: tokens with loss -1, -1 (A=1, r=1); row 1: one token with loss -4 (A=4, r=1), one padding.
    # token_mean: (-1 - 1 - 4) / 3 = -2; seq_mean_token_mean: (-1 + -4) / 2 = -2.5;
    # seq_mean_token_sum_norm (max_len = T = 2): -6 / (2 * 2) = -1.5.
    logprobs = torch.full((2, 2), OLD_LOGPROB, requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0], [4.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    expected = {"token_mean": -2.0, "seq_mean_token_mean": -2.5, "seq_mean_token_sum_norm": -1.5}
    for reduction, value in expected.items():
        loss, _ = get_policy_loss("ppo")(
            logprobs, logprobs.detach(), advantages, mask, make_config(loss_reduction=reduction)
        )
        assert loss.item() == pytest.approx(value), reduction


# --- Dual clip -----------------------------------------------------------------------------------


def test_dual_clip_caps_negative_advantages(make_config):
    # c = 3, clip 0.2:
    #   token 0: A=-1, r=5: PPO max(5, 1.2) = 5 > c*|A| = 3 -> 3   (dual clip, gradient 0)
    #   token 1: A=-1, r=2: PPO max(2, 1.2) = 2 < 3          -> 2   (gradient -A r = 2)
    #   token 2: A=+1, r=5: PPO max(-5, -1.2) = -1.2 (PPO clip; dual clip is for A < 0 only)
    # token_mean: (3 + 2 - 1.2) / 3 = 1.266667; gradient [0, 2, 0] / 3.
    batch = tokens_with_ratios([5.0, 2.0, 5.0], [-1, -1, 1])
    loss, grad, metrics = loss_and_grad("dual_clip", make_config(dual_clip_c=3.0), *batch)
    assert loss.item() == pytest.approx(3.8 / 3, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 2 / 3, 0.0]]))
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)
    assert metrics["clip_frac"] == pytest.approx(2 / 3)  # tokens 0 (dual) and 2 (PPO)
    # Plain PPO keeps the unbounded 5: (5 + 2 - 1.2) / 3.
    ppo_loss, _ = get_policy_loss("ppo")(*batch[:2], batch[2], batch[3], make_config())
    assert ppo_loss.item() == pytest.approx(5.8 / 3, abs=1e-5)


def test_dual_clip_rejects_a_constant_not_above_one(make_config):
    with pytest.raises(ValueError, match="dual_clip_c"):
        get_policy_loss("dual_clip")(*tokens_with_ratios([1.0], [1.0]), make_config(dual_clip_c=1.0))


# --- GSPO ----------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_and_its_gradient(make_config):
    # Token log ratios [0.1, 0.3] -> s = exp(mean) = exp(0.2) = 1.221403. With wide clips nothing is
    # clipped: loss = -A s = -1.221403 (per-sequence mean of identical token losses). The gradient of
    # -A exp(mean(logp - old)) wrt each logp is -A s / |y| = -0.610701.
    config = make_config(gspo_clip_low=10.0, gspo_clip_high=10.0)
    logprobs, old, advantages, mask = tokens_with_ratios([math.exp(0.1), math.exp(0.3)], [1.0, 1.0])
    loss, grad, metrics = loss_and_grad("gspo", config, logprobs, old, advantages, mask)
    assert loss.item() == pytest.approx(-1.221403, abs=1e-5)
    torch.testing.assert_close(grad, torch.full((1, 2), -0.610701))
    assert metrics["seq_ratio_mean"] == pytest.approx(1.221403, abs=1e-5)
    assert metrics["clip_frac"] == 0.0
    # The same gradient as the sequence-level objective written directly.
    (direct,) = torch.autograd.grad(-torch.exp((logprobs - old).mean()), logprobs)
    torch.testing.assert_close(grad, direct)


def test_gspo_clips_the_sequence_ratio(make_config):
    # Default clips (3e-4, 4e-4): s = 1.221403 > 1.0004 with A > 0 -> loss -1.0004, gradient 0.
    loss, grad, metrics = loss_and_grad(
        "gspo", make_config(), *tokens_with_ratios([math.exp(0.1), math.exp(0.3)], [1.0, 1.0])
    )
    assert loss.item() == pytest.approx(-1.0004, abs=1e-6)
    assert torch.all(grad == 0)
    assert metrics["clip_frac"] == 1.0


def test_gspo_always_averages_per_sequence(make_config):
    # Ratios 1. Sequence 0: one token, A=2 -> mean loss -2. Sequence 1: three tokens, A=-1 -> +1.
    # Per-sequence mean: (-2 + 1) / 2 = -0.5, even with loss_reduction=token_mean (that would be 0.25).
    logprobs = torch.full((2, 3), OLD_LOGPROB, requires_grad=True)
    advantages = torch.tensor([[2.0, 0, 0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    loss, _ = get_policy_loss("gspo")(
        logprobs, logprobs.detach(), advantages, mask, make_config(loss_reduction="token_mean")
    )
    assert loss.item() == pytest.approx(-0.5)


# --- CISPO ---------------------------------------------------------------------------------------


def test_cispo_gradient_is_truncated_is_weighted_reinforce(make_config):
    # cap = 1 + 0.28. Ratios [2.0, 0.5, 1.1] -> weights sg(min(r, 1.28)) = [1.28, 0.5, 1.1].
    # d loss / d logp_t = -w_t A_t / N with A = [1, -1, 2], N = 3:
    #   [-1.28/3, 0.5/3, -2.2/3] = [-0.426667, 0.166667, -0.733333].
    # Token 0 is clipped yet still gets a gradient (PPO would give it 0).
    batch = tokens_with_ratios([2.0, 0.5, 1.1], [1.0, -1.0, 2.0])
    loss, grad, metrics = loss_and_grad("cispo", make_config(cispo_clip_high=0.28), *batch)
    torch.testing.assert_close(grad, torch.tensor([[-0.426667, 0.166667, -0.733333]]))
    assert metrics["clip_frac"] == pytest.approx(1 / 3)
    # The REINFORCE estimator with the truncated importance weight, written out.
    logprobs, old, advantages, _ = batch
    weight = torch.exp(logprobs - old).clamp(max=1.28).detach()
    (reference,) = torch.autograd.grad(-(weight * advantages * logprobs).mean(), logprobs)
    torch.testing.assert_close(grad, reference)


def test_cispo_has_no_lower_bound(make_config):
    # Ratio 0.1 is far below any PPO clip_low; CISPO keeps its weight 0.1: gradient -0.1 * A.
    _, grad, metrics = loss_and_grad("cispo", make_config(), *tokens_with_ratios([0.1], [1.0]))
    assert grad.item() == pytest.approx(-0.1, abs=1e-6)
    assert metrics["clip_frac"] == 0.0


# --- Properties shared by every loss -------------------------------------------------------------

LOGPROB = st.floats(-6, 0, allow_nan=False, width=32)
ADVANTAGE = st.floats(-3, 3, allow_nan=False, width=32)
GARBAGE = st.floats(-1e4, 1e4, allow_nan=False, width=32)


@st.composite
def loss_batches(draw):
    batch, length = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    size = batch * length

    def tensor(elements):
        return torch.tensor(draw(st.lists(elements, min_size=size, max_size=size))).view(batch, length)

    logprobs, old = tensor(LOGPROB), tensor(LOGPROB)
    # Keep ratios within e^{+-1}: the region where clipping and its edges happen.
    old = logprobs + (old - logprobs).clamp(-1, 1)
    return logprobs, old, tensor(ADVANTAGE), tensor(st.integers(0, 1)), tensor(GARBAGE)


@pytest.mark.parametrize("name", BUILTIN_LOSSES)
@settings(max_examples=25, deadline=None)
@given(batch=loss_batches(), reduction=st.sampled_from(LOSS_REDUCTIONS))
def test_masked_tokens_change_nothing(make_config, name, batch, reduction):
    logprobs, old, advantages, mask, garbage = batch
    config = make_config(loss_reduction=reduction)
    masked = mask == 0

    def run(logprobs, old, advantages):
        leaf = logprobs.clone().requires_grad_()
        loss, metrics = get_policy_loss(name)(leaf, old, advantages, mask, config)
        (grad,) = torch.autograd.grad(loss, leaf)
        return loss, grad, metrics

    loss, grad, metrics = run(logprobs, old, advantages)
    loss2, grad2, metrics2 = run(
        torch.where(masked, garbage, logprobs),
        torch.where(masked, -garbage, old),
        torch.where(masked, garbage, advantages),
    )
    assert torch.isfinite(loss) and torch.equal(loss, loss2)
    assert torch.equal(grad, grad2) and torch.all(grad[masked] == 0)
    assert metrics == metrics2


@pytest.mark.parametrize("name", BUILTIN_LOSSES)
def test_nan_padding_does_not_poison_loss_or_gradient(make_config, name):
    logprobs = torch.tensor([[-1.0, float("nan")], [-2.0, float("inf")]], requires_grad=True)
    old = torch.tensor([[-1.1, float("nan")], [-1.9, float("-inf")]])
    advantages = torch.tensor([[1.0, float("nan")], [-1.0, 0.0]])
    mask = torch.tensor([[1, 0], [1, 0]])
    loss, grad, metrics = loss_and_grad(name, make_config(), logprobs, old, advantages, mask)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert all(math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("name", BUILTIN_LOSSES)
@pytest.mark.parametrize("reduction", LOSS_REDUCTIONS)
@settings(max_examples=10, deadline=None)
@given(batch=loss_batches())
def test_ratio_one_and_zero_advantages_give_zero_gradient(make_config, name, reduction, batch):
    logprobs, _, advantages, mask, _ = batch
    leaf = logprobs.clone().requires_grad_()
    loss, metrics = get_policy_loss(name)(
        leaf, logprobs, torch.zeros_like(advantages), mask, make_config(loss_reduction=reduction)
    )
    (grad,) = torch.autograd.grad(loss, leaf)
    assert torch.all(grad == 0)
    assert metrics["clip_frac"] == 0.0 and metrics["approx_kl"] == 0.0
    assert metrics["ratio_mean"] == (1.0 if mask.any() else 0.0)


@pytest.mark.parametrize("name", BUILTIN_LOSSES)
@settings(max_examples=25, deadline=None)
@given(batch=loss_batches(), reduction=st.sampled_from(LOSS_REDUCTIONS), data=st.data())
def test_loss_is_invariant_to_micro_batch_splitting(make_config, name, batch, reduction, data):
    logprobs, old, advantages, mask, _ = batch
    logprobs, old, advantages = logprobs.double(), old.double(), advantages.double()
    config = make_config(loss_reduction=reduction)
    loss_fn = get_policy_loss(name)
    full_loss, _ = loss_fn(logprobs, old, advantages, mask, config)
    normalizer = LossNormalizer.from_mask(mask)
    cut = data.draw(st.integers(0, mask.shape[0]), label="cut")
    micro_sum = sum(
        loss_fn(logprobs[rows], old[rows], advantages[rows], mask[rows], config, normalizer=normalizer)[0]
        for rows in (slice(0, cut), slice(cut, None))
    )
    torch.testing.assert_close(micro_sum, full_loss)


def test_shape_mismatch_is_one_clear_error(make_config):
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        get_policy_loss("ppo")(
            torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), make_config()
        )
