"""The config keys that give verl's and skyrl-train's conventions (docs/reference/conventions.md), each checked
against a number derived by hand, next to aloft's default on the same input."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError
from tests.algorithms.conftest import ALGORITHM_DEFAULTS

from aloft.algorithms import (
    LossNormalizer,
    aggregate_loss,
    apply_kl_penalty_to_rewards,
    get_advantage_estimator,
    get_policy_loss,
    kl_divergence,
    masked_whiten,
)
from aloft.config.schema import AlgorithmConfig


def test_the_tests_default_config_is_aloft_s_default_config():
    """The namespace the algorithm tests use stands for AlgorithmConfig: same fields, same defaults."""
    defaults = AlgorithmConfig().model_dump()
    for name, value in ALGORITHM_DEFAULTS.items():
        assert defaults[name] == value, name
    peer_keys = (
        "group_of_one whiten_formula whiten_gae cispo_clip_low kl_clamp seq_mean_counts_masked_rows".split()
    )
    assert set(peer_keys) <= set(ALGORITHM_DEFAULTS)


# --- a group of one ------------------------------------------------------------------------------

LONE_AND_PAIR_REWARDS = torch.tensor([[0.0, 0.5], [0.0, 1.0], [0.0, 0.0]])
"""Row 0 is alone in its group (score 0.5); rows 1 and 2 are a pair (scores 1 and 0)."""
LONE_AND_PAIR_GROUPS = torch.tensor([0, 1, 1])
ALL_TOKENS = torch.ones(3, 2)


@pytest.mark.parametrize(
    ("estimator", "norm_adv_by_std", "lone", "pair"),
    [
        # grpo: the pair's mean 0.5 and unbiased std sqrt(0.5); the lone sample's mean 0 and std 1.
        ("grpo", True, 0.5 / (1 + 1e-6), 0.5 / (math.sqrt(0.5) + 1e-6)),
        ("grpo", False, 0.5, 0.5),
        ("dr_grpo", True, 0.5, 0.5),
        # rloo: the pair's leave-one-out means are 0 and 1; the lone sample has no others (mean 0).
        ("rloo", True, 0.5, 1.0),
    ],
)
def test_group_of_one_score_gives_the_peers_advantage_and_zero_is_aloft_s(
    make_config, estimator, norm_adv_by_std, lone, pair
):
    estimate = get_advantage_estimator(estimator)
    for group_of_one, expected_lone in (("zero", 0.0), ("score", lone)):
        config = make_config(group_of_one=group_of_one, norm_adv_by_std=norm_adv_by_std)
        advantages, _ = estimate(LONE_AND_PAIR_REWARDS, ALL_TOKENS, LONE_AND_PAIR_GROUPS, None, config)
        expected = torch.tensor([[expected_lone] * 2, [pair] * 2, [-pair] * 2])
        torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)


def test_a_tied_group_of_two_is_still_zero_under_group_of_one_score(make_config):
    advantages, _ = get_advantage_estimator("grpo")(
        torch.tensor([[0.3], [0.3]]),
        torch.ones(2, 1),
        torch.tensor([0, 0]),
        None,
        make_config(group_of_one="score"),
    )
    assert advantages.abs().max().item() == 0.0


# --- whitening -----------------------------------------------------------------------------------

SPREAD = torch.tensor([[0.0], [2e-4]], dtype=torch.float64)
"""Mean 1e-4, unbiased variance 2e-8, std sqrt(2) * 1e-4: small enough for the two forms to differ."""


@pytest.mark.parametrize(
    ("formula", "expected"),
    [
        ("std_eps", 1 / (math.sqrt(2) + 0.01)),  # 1e-4 / (sqrt(2) 1e-4 + 1e-6)
        ("rsqrt_var_eps", 1 / math.sqrt(3)),  # 1e-4 / sqrt(2e-8 + 1e-8)
    ],
)
def test_whiten_formula(formula, expected, make_config):
    whitened = masked_whiten(SPREAD, torch.ones_like(SPREAD), formula)
    torch.testing.assert_close(whitened, torch.tensor([[-expected], [expected]], dtype=torch.float64))
    # reinforce++ whitens the return-to-go (here the one reward of each row) with the same formula.
    advantages, _ = get_advantage_estimator("reinforce++")(
        SPREAD, torch.ones_like(SPREAD), torch.tensor([0, 1]), None, make_config(whiten_formula=formula)
    )
    torch.testing.assert_close(advantages, whitened)


def test_an_unknown_whiten_formula_is_refused_by_name():
    with pytest.raises(
        ValueError, match="unknown whiten formula 'rsqrt'; choose one of: std_eps, rsqrt_var_eps"
    ):
        masked_whiten(SPREAD, torch.ones_like(SPREAD), "rsqrt")


@pytest.mark.parametrize("formula", ["std_eps", "rsqrt_var_eps"])
def test_whiten_gae_whitens_advantages_over_the_batch_and_leaves_returns(make_config, formula):
    """Values 0, gamma = lambda = 1: GAE is the return-to-go, [1, 1] and [0, 0]. Over four tokens the
    mean is 0.5 and the unbiased variance 1/3, so the whitened advantages are +-0.5 sqrt(3)."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones_like(rewards)
    values = torch.zeros_like(rewards)
    estimate = get_advantage_estimator("gae")
    plain, plain_returns = estimate(rewards, mask, torch.tensor([0, 1]), values, make_config())
    torch.testing.assert_close(plain, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    whitened, returns = estimate(
        rewards, mask, torch.tensor([0, 1]), values, make_config(whiten_gae=True, whiten_formula=formula)
    )
    half_root_three = 0.5 * math.sqrt(3)
    expected = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64) * half_root_three
    torch.testing.assert_close(whitened, expected, rtol=0, atol=3e-6)  # std + 1e-6 moves it by ~2.6e-6
    torch.testing.assert_close(returns, plain_returns)


# --- CISPO's lower clip --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cispo_clip_low", "weight"),
    [(None, 0.5), (0.2, 0.8), (0.0, 1.0)],  # aloft (the paper), verl (clip_low 0.2), skyrl-train (0.0)
)
def test_cispo_clip_low_floors_the_importance_weight(make_config, cispo_clip_low, weight):
    """One token, ratio 0.5 (logprob log 0.5 against an old logprob of 0), advantage 1: the token loss
    is -w * log 0.5 and its gradient in the logprob is -w."""
    logprobs = torch.tensor([[math.log(0.5)]], requires_grad=True)
    loss, metrics = get_policy_loss("cispo")(
        logprobs,
        torch.zeros(1, 1),
        torch.ones(1, 1),
        torch.ones(1, 1),
        make_config(cispo_clip_low=cispo_clip_low),
    )
    loss.backward()
    assert loss.item() == pytest.approx(weight * math.log(2), abs=1e-6)
    assert logprobs.grad.item() == pytest.approx(-weight, abs=1e-6)
    assert metrics["clip_frac"] == (0.0 if cispo_clip_low is None else 1.0)


# --- the k3 KL clamp -----------------------------------------------------------------------------


def test_kl_clamp_caps_k3_and_zeroes_its_gradient_where_it_binds():
    """ref - logprob = 3: k3 = e^3 - 3 - 1 = 16.0855 with gradient 1 - e^3 = -19.0855 in the logprob;
    clamped at 10 (the peers) it is 10 with no gradient."""
    ref = torch.tensor([[3.0]])
    for clamp, value, grad in ((None, math.exp(3) - 4, 1 - math.exp(3)), (10.0, 10.0, 0.0)):
        logprobs = torch.zeros(1, 1, requires_grad=True)
        kl = kl_divergence(logprobs, ref, "k3", clamp)
        kl.sum().backward()
        assert kl.item() == pytest.approx(value, rel=1e-6)
        assert logprobs.grad.item() == pytest.approx(grad, rel=1e-6, abs=1e-12)
    # The reward penalty takes the same clamp: 0 - 0.1 * 10.
    penalised = apply_kl_penalty_to_rewards(
        torch.zeros(1, 1), torch.zeros(1, 1), ref, torch.ones(1, 1), 0.1, "k3", 10.0
    )
    assert penalised.item() == pytest.approx(-1.0)


# --- sequence means over fully masked rows -------------------------------------------------------

TOKEN_LOSSES = torch.tensor([[1.0, 3.0], [5.0, 5.0]])
ONE_ROW_MASKED = torch.tensor([[1.0, 1.0], [0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "aloft", "skyrl"),
    [
        ("seq_mean_token_mean", 2.0, 1.0),  # mean(1, 3) over 1 sequence, or over 2 rows
        ("seq_mean_token_sum", 4.0, 2.0),  # (1 + 3) / 1, or / 2
        ("seq_mean_token_sum_norm", 2.0, 1.0),  # (1 + 3) / (T=2 * 1), or / (2 * 2)
        ("token_mean", 2.0, 2.0),  # counts tokens, not rows: unchanged
    ],
)
def test_seq_mean_counts_masked_rows(mode, aloft, skyrl):
    for count, expected in ((False, aloft), (True, skyrl)):
        normalizer = LossNormalizer.from_mask(ONE_ROW_MASKED, count_masked_rows=count)
        assert aggregate_loss(TOKEN_LOSSES, ONE_ROW_MASKED, mode, normalizer).item() == expected


# --- the config keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("group_of_one", "mean", "group_of_one"),
        ("whiten_formula", "rsqrt", "whiten_formula"),
        ("cispo_clip_low", 1.5, "cispo_clip_low"),
        ("kl_clamp", 0.0, "kl_clamp"),
    ],
)
def test_bad_peer_convention_values_are_refused_by_the_config(key, value, words):
    with pytest.raises(ValidationError, match=words):
        AlgorithmConfig(**{key: value})
