"""Small envs for trainer tests, importable by subprocesses (entry point strings)."""

from __future__ import annotations

import time
import zlib

from aloft.gym import Env, StepOutput, register, registered


class DigitsEnv(Env):
    """Reward = share of the reply's characters that are digits: easy for a tiny model to learn."""

    def step(self, action: str) -> StepOutput:
        text = action.strip()
        reward = sum(ch.isdigit() for ch in text) / max(len(text), 1)
        return StepOutput(observations=[], reward=reward, done=True, info={})


class FlakyEnv(Env):
    """Raises on every step: fails every trajectory, so the run must stop with this error."""

    def step(self, action: str) -> StepOutput:
        raise RuntimeError("tool crashed")


class SometimesFailingEnv(DigitsEnv):
    """Raises on about 3 in 10 replies (chosen by a hash of the reply, so reruns agree); the other
    replies get DigitsEnv's reward."""

    def step(self, action: str) -> StepOutput:
        if zlib.crc32(action.encode()) % 10 < 3:
            raise RuntimeError("tool crashed")
        return super().step(action)


class SometimesHangingEnv(DigitsEnv):
    """Never returns from ``step`` on about 3 in 10 replies (chosen by a hash of the reply), like a
    network call without a timeout; the other replies get DigitsEnv's reward."""

    def step(self, action: str) -> StepOutput:
        if zlib.crc32(action.encode()) % 10 < 3:
            time.sleep(3600)
        return super().step(action)


def register_test_envs() -> None:
    if "test_digits" not in registered():
        register("test_digits", DigitsEnv)
        register("test_flaky", FlakyEnv)
        register("test_sometimes_failing", SometimesFailingEnv)
        register("test_sometimes_hanging", SometimesHangingEnv)


register_test_envs()
