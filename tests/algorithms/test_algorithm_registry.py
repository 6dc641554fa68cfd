"""The estimator and policy-loss registries, including user-registered entries."""

from __future__ import annotations

import pytest
import torch

from aloft.algorithms import (
    LossNormalizer,
    advantage_estimators,
    aggregate_loss,
    get_advantage_estimator,
    get_policy_loss,
    policy_losses,
    register_advantage_estimator,
    register_policy_loss,
)


@pytest.fixture
def cleanup():
    """Names registered by a test, removed afterwards so tests stay independent."""
    added: list[tuple[dict, str]] = []
    yield added
    for table, name in added:
        table.pop(name, None)


def test_clashing_names_are_rejected_with_the_registered_names():
    with pytest.raises(ValueError, match=r"'grpo' is already registered.*rloo"):
        register_advantage_estimator("grpo")(lambda *args: args)
    with pytest.raises(ValueError, match=r"'ppo' is already registered.*cispo"):
        register_policy_loss("ppo")(lambda *args: args)
    # The built-ins were not replaced.
    assert get_advantage_estimator("grpo").__module__ == "aloft.algorithms.advantages"
    assert get_policy_loss("ppo").__module__ == "aloft.algorithms.policy_losses"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'grop'.*gae, grpo") as error:
        get_advantage_estimator("grop")
    assert "register_advantage_estimator" in str(error.value)
    with pytest.raises(ValueError, match=r"unknown policy loss 'ppo2'.*cispo, dual_clip, gspo, ppo"):
        get_policy_loss("ppo2")


def test_empty_name_is_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        register_policy_loss("")


def test_a_user_estimator_works_through_the_registry(make_config, cleanup):
    @register_advantage_estimator("test_raw_score")
    def raw_score(rewards, loss_mask, group_ids, values, config):
        scores = (rewards * loss_mask).sum(-1, keepdim=True) * loss_mask
        return scores, scores

    cleanup.append((advantage_estimators, "test_raw_score"))
    assert raw_score.__name__ == "raw_score"  # the decorator returns the function itself
    advantages, _ = get_advantage_estimator("test_raw_score")(
        torch.tensor([[0.0, 2.0], [3.0, 0.0]]),
        torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        torch.tensor([0, 0]),
        None,
        make_config(advantage="test_raw_score"),
    )
    torch.testing.assert_close(advantages, torch.tensor([[2.0, 2.0], [3.0, 0.0]]))


def test_a_user_policy_loss_works_through_the_registry(make_config, cleanup):
    @register_policy_loss("test_vanilla_pg")
    def vanilla_pg(
        logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None
    ):
        loss = aggregate_loss(-advantages * logprobs, loss_mask, config.loss_reduction, normalizer)
        return loss, {"clip_frac": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0}

    cleanup.append((policy_losses, "test_vanilla_pg"))
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, metrics = get_policy_loss("test_vanilla_pg")(
        logprobs,
        logprobs.detach(),
        torch.tensor([[1.0, -1.0]]),
        torch.ones(1, 2),
        make_config(policy_loss="test_vanilla_pg"),
        normalizer=LossNormalizer(num_tokens=4, num_sequences=2, max_len=2),
    )
    # (-1 * -1 + 1 * -2) / 4 tokens = -0.25; gradient -A / 4 = [-0.25, 0.25].
    assert loss.item() == pytest.approx(-0.25)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.25, 0.25]]))
    assert metrics["clip_frac"] == 0.0
