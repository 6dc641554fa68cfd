"""Every extension point's own settings (``params=``) and a user env's run settings (``overlay=``),
checked the way a user meets them: through ``load_config``, ``make``, ``make_plan`` and preflight."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from aloft import gym
from aloft.config import ConfigError, load_config
from aloft.plugin_settings import check_settings
from aloft.trainer.plans import check_plan_params, make_plan, register_plan
from aloft.trainer.preflight import check_env_settings

USER_ENV_MODULE = """
from pydantic import BaseModel, Field

from aloft import Env, StepOutput, register_env


class Settings(BaseModel):
    max_turns: int = Field(2, ge=1)
    bonus: float = 0.0


@register_env("settings_env", params=Settings, overlay={"generator": {"max_turns": 2, "stop": ["</t>"]}})
class SettingsEnv(Env):
    def step(self, action):
        return StepOutput([], self.config["bonus"], True)
"""


class Lag(BaseModel):
    lag: int = Field(1, ge=0)


@pytest.fixture
def user_env(tmp_path, monkeypatch, forget_plugins):
    (tmp_path / "settings_env_module.py").write_text(USER_ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    forget_plugins.append("settings_env_module")
    return "settings_env_module"


def test_check_settings_names_the_key_and_the_fix():
    selected = {"policy loss a": Lag, "advantage estimator b": None}
    check_settings("algorithm.params", selected, {"lag": 3})
    with pytest.raises(ValueError, match=r"^algorithm.params.lagg is not a setting of the policy loss a or "):
        check_settings("algorithm.params", selected, {"lagg": 3})
    with pytest.raises(ValueError, match=r"^algorithm.params.lag=-1 is invalid for the policy loss a: "):
        check_settings("algorithm.params", selected, {"lag": -1})
    # a plugin without a model that reads the section as it likes lets unknown keys through
    check_settings("env.config", {"env x": Lag, "env y": None}, {"other": 1}, undeclared_readers=True)
    with pytest.raises(ValueError, match="env.config.lag='no' is invalid for the env x"):
        check_settings("env.config", {"env x": Lag, "env y": None}, {"lag": "no"}, undeclared_readers=True)


def test_a_plan_gets_its_settings_validated_and_filled_in(forget_plugins):
    @register_plan("test_lagged", params=Lag)
    class Lagged:
        off_policy = False

        def __init__(self, params):
            self.params = params

        async def run(self, trainer): ...

    assert make_plan("test_lagged").params.lag == 1
    assert make_plan("test_lagged", {"lag": 4}).params.lag == 4
    check_plan_params("test_lagged", {"lag": 2})
    with pytest.raises(
        ValueError, match=r"trainer.plan_params.lag=-2 is invalid for the execution plan test_lagged"
    ):
        check_plan_params("test_lagged", {"lag": -2})
    with pytest.raises(
        ValueError, match=r"trainer.plan_params.lag is not a setting of the execution plan sync"
    ):
        check_plan_params("sync", {"lag": 2})  # the built-in plans declare none
    with pytest.raises(TypeError, match="params= must be a pydantic BaseModel class"):
        register_plan("test_bad_params", params=dict)


def test_a_user_env_brings_its_settings_and_its_run_settings(user_env):
    config = load_config("quickstart", [f"trainer.imports=[{user_env}]", "env=settings_env"])
    assert (config.generator.max_turns, config.generator.stop) == (2, ["</t>"])  # the overlay
    assert config.trainer.name == "quickstart-settings_env"  # another env, another run directory
    mine = load_config(
        "quickstart", [f"trainer.imports=[{user_env}]", "env=settings_env", "generator.max_turns=3"]
    )
    assert mine.generator.max_turns == 3 and mine.generator.stop == ["</t>"]  # the command line wins

    env = gym.make("settings_env", {"bonus": 0.5})
    assert env.config == {"max_turns": 2, "bonus": 0.5}  # validated, the model's default filled in
    assert env.step("x").reward == 0.5
    with pytest.raises(ValueError, match=r"^env.config.max_turns=0 is invalid for the env settings_env: "):
        gym.make("settings_env", {"max_turns": 0})
    assert gym.params_of("settings_env").__name__ == "Settings" and gym.params_of("arithmetic") is None


def test_env_config_is_checked_against_every_env_of_the_run(user_env):
    config = load_config(
        "quickstart", [f"trainer.imports=[{user_env}]", "env=settings_env", "env.config.bonuss=1"]
    )
    with pytest.raises(
        ConfigError,
        match=r"env.config.bonuss is not a setting of the env settings_env \(their settings: bonus, max_turns\)",
    ):
        check_env_settings(config, ["settings_env"])
    # beside an env that declares nothing (and reads env.config as it likes), the key may be its own
    check_env_settings(config, ["arithmetic", "settings_env"])


def test_a_module_that_cannot_be_imported_is_one_line():
    with pytest.raises(ConfigError, match=r"^trainer.imports: cannot import 'no_such_plugin_module' \("):
        load_config("quickstart", ["trainer.imports=[no_such_plugin_module]"])
