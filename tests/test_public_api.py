"""``import aloft``: the public API at the top level, loaded lazily, one decorator per extension point."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aloft
from aloft.gym import core as gym_core


def test_every_public_name_resolves():
    for name in aloft.__all__:
        assert getattr(aloft, name) is not None, name
    assert (
        aloft.make_env is aloft.gym.make
        and aloft.register_policy_loss is aloft.algorithms.register_policy_loss
    )
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        aloft.nope  # noqa: B018


def test_import_aloft_loads_no_layer():
    code = "import sys, aloft; print(sorted(m for m in ('torch', 'aloft.trainer', 'aloft.gym') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture
def saved_registry():
    saved = dict(gym_core._REGISTRY)
    yield
    gym_core._REGISTRY.clear()
    gym_core._REGISTRY.update(saved)


def test_register_env_decorates_a_class(saved_registry):
    @aloft.register_env("test_public_echo", reward_scale=2.0)
    class Echo(aloft.Env):
        def step(self, action):
            return aloft.StepOutput([], self.config["reward_scale"] * ("hi" in action), True)

    assert aloft.register_env("test_public_echo")(Echo) is Echo  # a module imported twice: no-op
    env = aloft.make_env("test_public_echo")
    env.reset([{"role": "user", "content": "say hi"}])
    assert env.step("hi").reward == 2.0

    with pytest.raises(ValueError, match="already registered"):

        @aloft.register_env("test_public_echo")
        class Other(aloft.Env):
            pass
