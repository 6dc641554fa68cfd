"""A plugin's own settings: an estimator or a loss declares a pydantic model at registration, the
user sets it under ``algorithm.params``, a bad key or value stops the run in one line naming it,
``aloft train --help`` lists it, and the function receives it with defaults filled in."""

from __future__ import annotations

import textwrap

import pytest
import torch
from pydantic import BaseModel

from aloft.algorithms import (
    check_algorithm_params,
    get_advantage_estimator,
    get_policy_loss,
    register_advantage_estimator,
    register_policy_loss,
)
from aloft.cli import main


class BonusParams(BaseModel):
    bonus: float = 0.0


class TemperedParams(BaseModel):
    power: float = 1.0
    floor: int


@register_advantage_estimator("test_bonus_adv", params=BonusParams)
def bonus_advantages(rewards, loss_mask, group_ids, values, config, *, params):
    advantages = (rewards.sum(dim=1, keepdim=True) + params.bonus) * loss_mask
    return advantages, advantages


@register_policy_loss("test_tempered", params=TemperedParams)
def tempered(
    logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None, params
):
    return (logprobs * 0).sum(), {"power": params.power, "floor": float(params.floor)}


class Algo:
    def __init__(self, params):
        self.params = params


def test_the_function_gets_its_settings_with_defaults():
    rewards, mask = torch.tensor([[0.0, 1.0]]), torch.ones(1, 2)
    estimator = get_advantage_estimator("test_bonus_adv")
    advantages, _ = estimator(rewards, mask, torch.zeros(1), None, Algo({"bonus": 2.0, "power": 3.0}))
    assert advantages.tolist() == [[3.0, 3.0]]
    assert estimator(rewards, mask, torch.zeros(1), None, Algo({}))[0].tolist() == [[1.0, 1.0]]
    _, metrics = get_policy_loss("test_tempered")(rewards, rewards, rewards, mask, Algo({"floor": 2}))
    assert metrics == {"power": 1.0, "floor": 2.0}


def test_a_loss_without_settings_is_called_as_before():
    from aloft.algorithms.policy_losses import ppo

    assert get_policy_loss("ppo") is ppo


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"bonsu": 1.0},
            "algorithm.params.bonsu is not a setting of the advantage estimator test_bonus_adv "
            "or the policy loss test_tempered (their settings: bonus, floor, power)",
        ),
        (
            {"floor": 1, "power": "strong"},
            "algorithm.params.power='strong' is invalid for the policy loss "
            "test_tempered: Input should be a valid number",
        ),
        (
            {"bonus": 1.0},
            "algorithm.params.floor=None is invalid for the policy loss test_tempered: Field required",
        ),
    ],
    ids=["unknown-key", "bad-value", "missing-required"],
)
def test_bad_settings_fail_in_one_line(params, message):
    with pytest.raises(ValueError) as error:
        check_algorithm_params("test_bonus_adv", "test_tempered", params)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_settings_of_a_plugin_not_selected_are_refused():
    check_algorithm_params("test_bonus_adv", "ppo", {"bonus": 1.0})
    with pytest.raises(
        ValueError, match=r"algorithm.params.floor is not a setting .* \(their settings: bonus\)"
    ):
        check_algorithm_params("test_bonus_adv", "ppo", {"floor": 1})
    with pytest.raises(ValueError, match=r"\(their settings: none\)"):
        check_algorithm_params("grpo", "ppo", {"bonus": 1.0})


PLUGIN = textwrap.dedent(
    """
    from pydantic import BaseModel, Field

    from aloft.algorithms import aggregate_loss, register_policy_loss


    class HalvedParams(BaseModel):
        factor: float = Field(0.5, gt=0, description="scales the advantages")


    @register_policy_loss("test_cli_halved", params=HalvedParams)
    def halved(logprobs, old_logprobs, advantages, mask, config, sampler_logprobs=None, *, normalizer=None, params):
        loss = aggregate_loss(-params.factor * advantages * logprobs, mask, config.loss_reduction, normalizer)
        return loss, {}
    """
)


def test_the_command_line_checks_and_lists_a_plugins_settings(tmp_path, monkeypatch, capsys):
    (tmp_path / "halved_loss.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", "--help", "trainer.imports=[halved_loss]"]) == 0
    help_text = capsys.readouterr().out
    assert (
        "  policy loss test_cli_halved:\n    algorithm.params.factor  float = 0.5\n        scales the advantages"
        in help_text
    )
    base = ["train", "quickstart", "trainer.imports=[halved_loss]", "algorithm.policy_loss=test_cli_halved"]
    assert main([*base, "algorithm.params.factor=-1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        "aloft: config error: algorithm.params.factor=-1 is invalid for the policy loss test_cli_halved: "
        "Input should be greater than 0"
    )
    assert main([*base, "algorithm.params.factr=2"]) == 2
    assert "algorithm.params.factr is not a setting" in capsys.readouterr().err
