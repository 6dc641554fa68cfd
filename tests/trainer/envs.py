"""Small envs for trainer tests, importable by subprocesses (entry point strings)."""

from __future__ import annotations

from aloft.gym import Env, StepOutput, register, registered


class DigitsEnv(Env):
    """Reward = share of the reply's characters that are digits: easy for a tiny model to learn."""

    def step(self, action: str) -> StepOutput:
        text = action.strip()
        reward = sum(ch.isdigit() for ch in text) / max(len(text), 1)
        return StepOutput(observations=[], reward=reward, done=True, info={})


class FlakyEnv(Env):
    """Raises on every step: must fail its trajectories, never the run."""

    def step(self, action: str) -> StepOutput:
        raise RuntimeError("tool crashed")


def register_test_envs() -> None:
    if "test_digits" not in registered():
        register("test_digits", DigitsEnv)
        register("test_flaky", FlakyEnv)


register_test_envs()
