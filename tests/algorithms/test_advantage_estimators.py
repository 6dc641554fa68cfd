"""Advantage estimators: hand-derived numbers and invariants (masking, group sums)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.algorithms import advantage_estimators, get_advantage_estimator

BUILTIN_ESTIMATORS = ["gae", "grpo", "dr_grpo", "rloo", "reinforce++", "reinforce++_baseline"]
GROUP_RELATIVE = ["grpo", "dr_grpo", "rloo"]


def estimate(name, rewards, loss_mask, group_ids, config, values=None):
    return get_advantage_estimator(name)(
        torch.tensor(rewards, dtype=torch.float32),
        torch.tensor(loss_mask),
        torch.tensor(group_ids),
        None if values is None else torch.tensor(values, dtype=torch.float32),
        config,
    )


def test_every_builtin_estimator_is_registered():
    assert set(BUILTIN_ESTIMATORS) <= set(advantage_estimators)


# --- GRPO / Dr.GRPO ------------------------------------------------------------------------------


def test_grpo_one_group_of_four(make_config):
    # Scores [1, 0, 0, 1]: mean 0.5, deviations +-0.5, unbiased var = 4 * 0.25 / 3 = 1/3,
    # std = 0.57735, so A = +-0.5 / 0.57735 = +-0.866025. Reward sits on the last policy token (index 1);
    # index 2 is padding and must get 0.
    rewards = [[0, 1, 0], [0, 0, 0], [0, 0, 0], [0, 1, 0]]
    mask = [[1, 1, 0]] * 4
    advantages, returns = estimate("grpo", rewards, mask, [0, 0, 0, 0], make_config())
    expected = torch.tensor([0.866025, -0.866025, -0.866025, 0.866025])
    torch.testing.assert_close(advantages[:, 0], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(advantages[:, 1], expected, atol=1e-5, rtol=0)
    assert torch.all(advantages[:, 2] == 0)
    # Returns are the broadcast score on policy tokens.
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1, 0], [0, 0, 0], [0, 0, 0], [1, 1, 0]]))


def test_grpo_groups_are_normalised_separately_whatever_their_ids(make_config):
    # Group 7 has scores [1, 0]: mean 0.5, unbiased std sqrt(0.5) = 0.707107 -> +-0.707107.
    # Group 3 has scores [2, 4]: mean 3, unbiased std sqrt(2) = 1.414214 -> -+0.707107.
    rewards = [[1.0], [2.0], [0.0], [4.0]]
    advantages, _ = estimate("grpo", rewards, [[1]] * 4, [7, 3, 7, 3], make_config())
    torch.testing.assert_close(
        advantages[:, 0], torch.tensor([0.707107, -0.707107, -0.707107, 0.707107]), atol=1e-5, rtol=0
    )


def test_grpo_score_is_the_sum_of_turn_rewards(make_config):
    # Two turns: 0.5 on turn 1's last policy token, 1.0 on turn 2's; the env observation (mask 0) sits
    # between them. Scores [1.5, 0.5] -> mean 1, deviations +-0.5, unbiased std sqrt(0.5) -> +-0.707107.
    rewards = [[0.5, 0, 1.0], [0.5, 0, 0.0]]
    mask = [[1, 0, 1], [1, 0, 1]]
    advantages, returns = estimate("grpo", rewards, mask, [0, 0], make_config())
    torch.testing.assert_close(
        advantages, torch.tensor([[0.707107, 0, 0.707107], [-0.707107, 0, -0.707107]]), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(returns, torch.tensor([[1.5, 0, 1.5], [0.5, 0, 0.5]]))


@pytest.mark.parametrize(
    ("name", "norm_adv_by_std"), [("grpo", False), ("dr_grpo", True), ("dr_grpo", False)]
)
def test_dr_grpo_only_subtracts_the_group_mean(make_config, name, norm_adv_by_std):
    # Scores [1, 0, 0, 1], mean 0.5 -> A = +-0.5 (no std division). dr_grpo ignores norm_adv_by_std.
    config = make_config(norm_adv_by_std=norm_adv_by_std)
    advantages, _ = estimate(name, [[1.0], [0.0], [0.0], [1.0]], [[1]] * 4, [0] * 4, config)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


# --- RLOO ----------------------------------------------------------------------------------------


def test_rloo_leave_one_out_baseline(make_config):
    # Scores [1, 0, 0, 1]: A_0 = 1 - (0 + 0 + 1) / 3 = 2/3, A_1 = 0 - (1 + 0 + 1) / 3 = -2/3.
    advantages, returns = estimate("rloo", [[1.0], [0.0], [0.0], [1.0]], [[1]] * 4, [0] * 4, make_config())
    torch.testing.assert_close(advantages[:, 0], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    torch.testing.assert_close(returns[:, 0], torch.tensor([1.0, 0.0, 0.0, 1.0]))


def test_rloo_uneven_scores(make_config):
    # Scores [3, 1, 2]: A_0 = 3 - 1.5 = 1.5, A_1 = 1 - 2.5 = -1.5, A_2 = 2 - 2 = 0.
    advantages, _ = estimate("rloo", [[3.0], [1.0], [2.0]], [[1]] * 3, [5, 5, 5], make_config())
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1.5, -1.5, 0.0]))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce++_baseline"])
def test_a_group_of_one_gets_zero_advantage(make_config, name):
    # Row 0 is alone in group 1; rows 1-2 form group 2 with scores [5, 1].
    advantages, _ = estimate(
        name, [[3.0, 0.0], [5.0, 0.0], [1.0, 0.0]], [[1, 0]] * 3, [1, 2, 2], make_config()
    )
    assert torch.isfinite(advantages).all()
    if name != "reinforce++_baseline":  # whitening shifts every token by the batch mean
        assert advantages[0, 0] == 0.0
        assert advantages[1, 0] > 0 > advantages[2, 0]


# --- GAE -----------------------------------------------------------------------------------------

# One 3-token sequence, rewards [0, 0, 1], values [0.5, 0.4, 0.3], gamma 0.9, lam 0.8 (gamma*lam = 0.72):
#   t=2: delta = 1 + 0.9*0   - 0.3 =  0.70;  A_2 = 0.70
#   t=1: delta = 0 + 0.9*0.3 - 0.4 = -0.13;  A_1 = -0.13 + 0.72*0.70  = 0.374
#   t=0: delta = 0 + 0.9*0.4 - 0.5 = -0.14;  A_0 = -0.14 + 0.72*0.374 = 0.12928
# returns = A + V = [0.62928, 0.774, 1.0]
GAE_ADVANTAGES = [0.12928, 0.374, 0.7]
GAE_RETURNS = [0.62928, 0.774, 1.0]


def test_gae_three_tokens(make_config):
    config = make_config(gamma=0.9, lam=0.8)
    advantages, returns = estimate("gae", [[0, 0, 1.0]], [[1, 1, 1]], [0], config, values=[[0.5, 0.4, 0.3]])
    torch.testing.assert_close(advantages, torch.tensor([GAE_ADVANTAGES]))
    torch.testing.assert_close(returns, torch.tensor([GAE_RETURNS]))


def test_gae_skips_env_tokens_instead_of_discounting_over_them(make_config):
    # The same three policy tokens with an env observation (mask 0) after the first and padding at the
    # end; the observation's value (9) and reward (5) must be ignored, and it is not a time step.
    config = make_config(gamma=0.9, lam=0.8)
    advantages, returns = estimate(
        "gae",
        [[0, 5.0, 0, 1.0, 0]],
        [[1, 0, 1, 1, 0]],
        [0],
        config,
        values=[[0.5, 9.0, 0.4, 0.3, 7.0]],
    )
    a0, a1, a2 = GAE_ADVANTAGES
    r0, r1, r2 = GAE_RETURNS
    torch.testing.assert_close(advantages, torch.tensor([[a0, 0, a1, a2, 0]]))
    torch.testing.assert_close(returns, torch.tensor([[r0, 0, r1, r2, 0]]))


def test_gae_with_gamma_lam_one_is_return_minus_value(make_config):
    # gamma = lam = 1: A_t = sum of future rewards - V_t = 1 - V_t.
    advantages, returns = estimate(
        "gae", [[0, 0, 1.0]], [[1, 1, 1]], [0], make_config(), values=[[0.5, 0.4, 0.3]]
    )
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.6, 0.7]]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0]]))


def test_gae_without_values_says_a_critic_is_needed(make_config):
    with pytest.raises(ValueError, match="critic"):
        estimate("gae", [[1.0]], [[1]], [0], make_config())


def test_gae_advantages_carry_no_grad(make_config):
    values = torch.tensor([[0.5, 0.4]], requires_grad=True)
    advantages, returns = get_advantage_estimator("gae")(
        torch.tensor([[0.0, 1.0]]), torch.ones(1, 2), torch.zeros(1, dtype=torch.long), values, make_config()
    )
    assert not advantages.requires_grad and not returns.requires_grad


# --- REINFORCE++ ---------------------------------------------------------------------------------

# Rewards [0, 0, 1] with gamma 0.5: return-to-go G = [0.25, 0.5, 1.0]. Whitening over the 3 tokens:
# mean 0.583333, deviations [-0.333333, -0.083333, 0.416667], squares sum 0.291667, unbiased var
# 0.145833, std 0.381881 -> A = [-0.872872, -0.218218, 1.091089].
REINFORCE_PP_ADVANTAGES = [-0.872872, -0.218218, 1.091089]


def test_reinforce_plus_plus_discounts_then_whitens(make_config):
    advantages, returns = estimate("reinforce++", [[0, 0, 1.0]], [[1, 1, 1]], [0], make_config(gamma=0.5))
    torch.testing.assert_close(advantages, torch.tensor([REINFORCE_PP_ADVANTAGES]), atol=1e-5, rtol=0)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0]]))


def test_reinforce_plus_plus_discounts_over_policy_tokens_only(make_config):
    # An env observation (reward 7 on it ignored) between the first and second policy tokens is not a
    # discount step: the same numbers as above on the policy tokens.
    advantages, returns = estimate(
        "reinforce++", [[0, 7.0, 0, 1.0]], [[1, 0, 1, 1]], [0], make_config(gamma=0.5)
    )
    a0, a1, a2 = REINFORCE_PP_ADVANTAGES
    torch.testing.assert_close(advantages, torch.tensor([[a0, 0, a1, a2]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0, 0.5, 1.0]]))


def test_reinforce_plus_plus_baseline_subtracts_group_mean(make_config):
    # Group scores [1, 0], mean 0.5: centred last-token rewards [0.5, -0.5]. Return-to-go with gamma 0.5:
    # [[0.25, 0.5], [-0.25, -0.5]]; batch mean 0, unbiased var (2*0.0625 + 2*0.25) / 3 = 0.208333,
    # std 0.456435 -> A = [[0.547723, 1.095445], [-0.547723, -1.095445]].
    # Returns are the return-to-go of the raw rewards: [[0.5, 1], [0, 0]].
    advantages, returns = estimate(
        "reinforce++_baseline", [[0, 1.0], [0, 0.0]], [[1, 1], [1, 1]], [0, 0], make_config(gamma=0.5)
    )
    torch.testing.assert_close(
        advantages, torch.tensor([[0.547723, 1.095445], [-0.547723, -1.095445]]), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(returns, torch.tensor([[0.5, 1.0], [0.0, 0.0]]))


def test_reinforce_plus_plus_baseline_zeroes_groups_without_variance(make_config):
    # Group 0 all succeed, group 1 all fail. Plain reinforce++ whitens G = [1, 1, 0, 0] to +-0.866025
    # (mean 0.5, unbiased std 0.57735); the group baseline makes every centred reward 0 -> A = 0.
    rewards, mask, groups = [[1.0], [1.0], [0.0], [0.0]], [[1]] * 4, [0, 0, 1, 1]
    plain, _ = estimate("reinforce++", rewards, mask, groups, make_config())
    torch.testing.assert_close(plain[:, 0], torch.tensor([0.866025, 0.866025, -0.866025, -0.866025]))
    baselined, _ = estimate("reinforce++_baseline", rewards, mask, groups, make_config())
    assert torch.all(baselined == 0)


def test_shape_errors_name_the_tensors(make_config):
    with pytest.raises(ValueError, match="group_ids"):
        estimate("grpo", [[1.0], [0.0]], [[1], [1]], [0, 0, 0], make_config())
    with pytest.raises(ValueError, match="loss_mask"):
        estimate("grpo", [[1.0, 0.0]], [[1]], [0], make_config())


# --- Properties ----------------------------------------------------------------------------------

REWARD = st.floats(-10, 10, allow_nan=False, width=32)


@st.composite
def batches(draw, every_row_has_a_policy_token=False):
    batch, length = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    size = batch * length
    mask = torch.tensor(draw(st.lists(st.integers(0, 1), min_size=size, max_size=size))).view(batch, length)
    if every_row_has_a_policy_token:
        mask[:, draw(st.integers(0, length - 1))] = 1
    rewards = torch.tensor(draw(st.lists(REWARD, min_size=size, max_size=size))).view(batch, length)
    values = torch.tensor(draw(st.lists(REWARD, min_size=size, max_size=size))).view(batch, length)
    garbage = torch.tensor(draw(st.lists(REWARD, min_size=size, max_size=size))).view(batch, length)
    group_ids = torch.tensor(draw(st.lists(st.integers(0, 2), min_size=batch, max_size=batch)))
    return rewards, mask, group_ids, values, garbage


@pytest.mark.parametrize("name", BUILTIN_ESTIMATORS)
@settings(max_examples=30, deadline=None)
@given(batch=batches(), gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.95]))
def test_masked_tokens_change_nothing(make_config, name, batch, gamma, lam):
    rewards, mask, group_ids, values, garbage = batch
    config = make_config(gamma=gamma, lam=lam)
    estimator = get_advantage_estimator(name)
    advantages, returns = estimator(rewards, mask, group_ids, values, config)
    # Overwrite rewards and values at mask-0 positions: nothing may move.
    masked = mask == 0
    advantages2, returns2 = estimator(
        torch.where(masked, garbage, rewards), mask, group_ids, torch.where(masked, -garbage, values), config
    )
    assert torch.equal(advantages, advantages2) and torch.equal(returns, returns2)
    assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()
    assert torch.all(advantages[masked] == 0) and torch.all(returns[masked] == 0)


@pytest.mark.parametrize("name", GROUP_RELATIVE)
@settings(max_examples=30, deadline=None)
@given(batch=batches(every_row_has_a_policy_token=True))
def test_group_advantages_sum_to_zero(make_config, name, batch):
    rewards, mask, group_ids, _, _ = batch
    advantages, _ = get_advantage_estimator(name)(rewards, mask, group_ids, None, make_config())
    # One advantage per sequence, repeated on its policy tokens.
    per_sequence = advantages.sum(-1) / mask.sum(-1)
    for group in group_ids.unique():
        in_group = per_sequence[group_ids == group]
        scale = max(1.0, float(in_group.abs().max()))
        assert math.isclose(float(in_group.sum()), 0.0, abs_tol=1e-4 * scale * len(in_group))


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("value", [0.3, 0.1, 1 / 3, -0.7, 1e-3])
@pytest.mark.parametrize("size", [2, 3, 6, 7, 16])
def test_a_tied_group_gets_exactly_zero(estimator, dtype, value, size, make_config):
    """Issue 23: a group whose samples all scored ``value`` gets advantage 0.0 exactly, next to a
    group with varied scores that still gets its usual advantages."""
    tied = torch.full((size, 3), 0.0, dtype=dtype)
    tied[:, -1] = value
    varied = torch.zeros(2, 3, dtype=dtype)
    varied[:, -1] = torch.tensor([value, value + 1.0], dtype=dtype)
    rewards = torch.cat([tied, varied])
    mask = torch.ones_like(rewards)
    group_ids = torch.tensor([0] * size + [1, 1])
    advantages, _ = get_advantage_estimator(estimator)(rewards, mask, group_ids, None, make_config())
    assert advantages.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.equal(advantages[:size], torch.zeros(size, 3, dtype=advantages.dtype))
    low, high = advantages[size, 0], advantages[size + 1, 0]
    assert low < 0 < high and float(low) == pytest.approx(-float(high))
