"""The env registry and the Env base class, as a user registering their own env sees them."""

from __future__ import annotations

import sys
import textwrap

import pytest

from aloft.gym import Env, StepOutput, UnknownEnvError, make, register, registered
from aloft.gym import core as gym_core


@pytest.fixture(autouse=True)
def restore_registry():
    saved = dict(gym_core._REGISTRY)
    yield
    gym_core._REGISTRY.clear()
    gym_core._REGISTRY.update(saved)


class EchoEnv(Env):
    """Ends at once, echoing the completion back as a tool message."""

    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[{"role": "tool", "content": action}], reward=0.0, done=True, info={})


class OtherEnv(EchoEnv):
    pass


def test_builtin_arithmetic_is_registered_and_registered_is_sorted():
    register("zeta", EchoEnv)
    register("alpha", EchoEnv)
    ids = registered()
    assert "arithmetic" in ids
    assert ids == sorted(ids)


def test_registering_an_id_twice_raises_naming_only_the_clash():
    register("echo", EchoEnv)
    with pytest.raises(ValueError, match="env id 'echo' is already registered; pass override=True") as error:
        register("echo", OtherEnv)
    assert "arithmetic" not in str(error.value)
    assert type(make("echo")) is EchoEnv


def test_override_replaces_the_entry_point():
    register("echo", EchoEnv)
    register("echo", OtherEnv, override=True)
    assert type(make("echo")) is OtherEnv


def test_unknown_id_lists_the_known_ids_sorted():
    register("zeta", EchoEnv)
    register("alpha", EchoEnv)
    with pytest.raises(UnknownEnvError) as error:
        make("no_such_env")
    message = str(error.value)
    assert "'no_such_env'" in message
    assert f"registered envs: {registered()}" in message
    assert registered().index("alpha") < registered().index("arithmetic") < registered().index("zeta")
    assert isinstance(error.value, KeyError)  # catchable as a lookup failure


def test_make_merges_registration_defaults_under_the_given_config():
    register("echo", EchoEnv, greeting="hi", max_turns=2)
    config = {"max_turns": 5}
    env = make("echo", config=config, extras={"answer": "8"})
    assert env.config == {"greeting": "hi", "max_turns": 5}
    assert env.extras == {"answer": "8"}
    assert config == {"max_turns": 5}  # the caller's dict is not modified
    assert make("echo").config == {"greeting": "hi", "max_turns": 2}


def test_string_entry_point_is_imported_lazily_on_first_make(tmp_path, monkeypatch):
    (tmp_path / "my_lazy_envs.py").write_text(
        textwrap.dedent(
            """
            from aloft.gym import Env, StepOutput

            class CountdownEnv(Env):
                def step(self, action):
                    return StepOutput(observations=[], reward=1.0, done=True, info={})
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_lazy_envs", raising=False)
    register("countdown", "my_lazy_envs:CountdownEnv", start=3)
    assert "my_lazy_envs" not in sys.modules

    env = make("countdown")
    assert "my_lazy_envs" in sys.modules
    assert type(env).__name__ == "CountdownEnv"
    assert env.config == {"start": 3}
    assert env.step("anything").reward == 1.0


def test_malformed_entry_point_string_fails_at_register():
    with pytest.raises(ValueError, match="must look like 'package.module:ClassName'"):
        register("broken", "my_module.MyEnv")


def test_unimportable_entry_point_fails_at_make_naming_the_module():
    register("ghost", "no_such_module_anywhere:GhostEnv")  # registering never imports
    with pytest.raises(ImportError, match="env 'ghost': cannot import module 'no_such_module_anywhere'"):
        make("ghost")
    register("ghost_attr", "aloft.gym.envs.arithmetic:NoSuchClass")
    with pytest.raises(ImportError, match="has no attribute 'NoSuchClass'"):
        make("ghost_attr")


def test_factory_must_return_an_env():
    register("not_an_env", lambda config, extras: {"config": config})
    with pytest.raises(TypeError, match="returned dict, not an aloft.gym.Env"):
        make("not_an_env")


def test_callable_factory_receives_merged_config_and_extras():
    seen = {}

    def factory(config, extras):
        seen.update(config=config, extras=extras)
        return EchoEnv(config, extras)

    register("factory_env", factory, temperature=0.5)
    make("factory_env", config={"seed": 1}, extras={"question": "q"})
    assert seen == {"config": {"temperature": 0.5, "seed": 1}, "extras": {"question": "q"}}


def test_env_base_defaults():
    prompt = [{"role": "user", "content": "Add 3 and 5."}]
    env = EchoEnv()
    messages, info = env.reset(prompt)
    assert messages == prompt and messages is not prompt
    assert info == {}
    assert env.metrics() == {}
    env.close()
    env.close()  # idempotent
    with EchoEnv() as managed:
        assert managed.step("x").observations == [{"role": "tool", "content": "x"}]


def test_env_without_step_cannot_be_instantiated():
    class NoStep(Env):
        pass

    with pytest.raises(TypeError, match="step"):
        NoStep()
