"""check_env accepts the built-in env and rejects broken ones with a message that says what broke."""

from __future__ import annotations

import itertools

import pytest

from aloft.data import build_dataset, validate_row
from aloft.gym import Env, EnvCheckError, StepOutput, check_env, register
from aloft.gym import core as gym_core


@pytest.fixture(autouse=True)
def restore_registry():
    saved = dict(gym_core._REGISTRY)
    yield
    gym_core._REGISTRY.clear()
    gym_core._REGISTRY.update(saved)


ROWS = build_dataset("arithmetic", n=3, seed=0)


@pytest.mark.parametrize("config", [None, {"max_turns": 3}, {"answer_format": "boxed", "max_turns": 2}])
def test_arithmetic_passes_on_raw_rows_from_the_builder(config):
    check_env("arithmetic", ROWS, config=config)


def test_arithmetic_passes_on_validated_dataset_rows():
    rows = [validate_row(raw, index, "arithmetic.jsonl") for index, raw in enumerate(ROWS)]
    check_env("arithmetic", rows, config={"max_turns": 2})


class GoodEnv(Env):
    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[], reward=1.0, done=True, info={})


class NanRewardEnv(GoodEnv):
    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[], reward=float("nan"), done=True, info={})


_instances = itertools.count()


class InstanceCountingEnv(GoodEnv):
    """Non-deterministic across instances: the reward depends on how many envs were built before."""

    def __init__(self, config=None, extras=None):
        super().__init__(config, extras)
        self.serial = next(_instances)

    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[], reward=float(self.serial), done=True, info={})


class LeakyEnv(GoodEnv):
    """reset() forgets to clear the episode counter, so a second episode differs."""

    def __init__(self, config=None, extras=None):
        super().__init__(config, extras)
        self.episodes_seen = 0

    def step(self, action: str) -> StepOutput:
        self.episodes_seen += 1
        return StepOutput(observations=[], reward=float(self.episodes_seen), done=True, info={})


class RaisingEnv(GoodEnv):
    def step(self, action: str) -> StepOutput:
        if not action:
            raise ValueError("empty completion")
        return super().step(action)


class ContentlessObservationEnv(GoodEnv):
    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[{"role": "user"}], reward=0.0, done=True, info={})


class IntDoneEnv(GoodEnv):
    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[], reward=0.0, done=1, info={})  # type: ignore[arg-type]


class PromptMutatingEnv(GoodEnv):
    def reset(self, prompt):
        prompt.append({"role": "user", "content": "extra"})
        return prompt, {}


class CloseOnceEnv(GoodEnv):
    def close(self) -> None:
        if getattr(self, "closed_once", False):
            raise RuntimeError("already closed")
        self.closed_once = True


class SetInInfoEnv(GoodEnv):
    def step(self, action: str) -> StepOutput:
        return StepOutput(observations=[], reward=0.0, done=True, info={"seen": {action}})


class BadMetricsEnv(GoodEnv):
    def metrics(self) -> dict[str, float]:
        return {"correct": float("inf")}


@pytest.mark.parametrize(
    ("env_class", "message"),
    [
        (
            NanRewardEnv,
            r"row 0, completions 'empty': step\(\) on turn 0 returned reward nan; rewards must be finite",
        ),
        (
            InstanceCountingEnv,
            "two envs built from the same row gave different outputs.*must be deterministic",
        ),
        (LeakyEnv, r"second episode on the same env after reset\(\) differs.*reset\(\) must clear"),
        (RaisingEnv, r"step\(\) on turn 0 raised ValueError: empty completion; envs must turn malformed"),
        (ContentlessObservationEnv, r"observations\[0\] needs a str 'content', got NoneType"),
        (IntDoneEnv, r"returned done=1 \(int\); it must be a bool"),
        (PromptMutatingEnv, r"reset\(\) mutated the prompt"),
        (CloseOnceEnv, r"a second close\(\) raised RuntimeError: already closed"),
        (SetInInfoEnv, r"returned info that is not JSON-serialisable \(Object of type set"),
        (BadMetricsEnv, r"metrics\(\) entry 'correct': inf must be a finite float"),
    ],
)
def test_broken_envs_fail_with_a_clear_message(env_class, message):
    register("broken", env_class)
    with pytest.raises(EnvCheckError, match=message):
        check_env("broken", ROWS)


def test_good_env_passes_and_check_errors_are_assertion_errors():
    register("good", GoodEnv)
    check_env("good", ROWS)
    assert issubclass(EnvCheckError, AssertionError)


def test_no_rows_is_an_error():
    with pytest.raises(EnvCheckError, match="got no rows"):
        check_env("arithmetic", [])
