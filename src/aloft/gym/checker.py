"""``check_env``: the conformance checks every registered env must pass (docs/reference/design.md §3).

It drives the env through short scripted episodes with canned completions (empty, garbage, and
answers built from the row's ground truth when it has one) and checks what a generator relies on:

- ``reset`` returns ``(list of messages, dict)`` and leaves the row's prompt untouched;
- ``step`` returns a ``StepOutput`` whose observations are ``{role: str, content: str}`` messages,
  whose reward is a finite number, ``done`` a bool and ``info`` a JSON-serialisable dict;
  malformed completions never raise;
- ``metrics()`` is a ``dict[str, finite float]``;
- determinism: the same row and the same completions give the same outputs, both on a fresh env and
  on the same env reused after ``reset`` (state must not leak between episodes);
- ``close()`` may be called twice.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aloft.gym.core import Env, StepOutput, make
from aloft.types import Message

__all__ = ["EnvCheckError", "check_env"]

GARBAGE_COMPLETION = "}{ <|endoftext|> \\boxed{ The answer is nan ☃ \x00"
"""A completion no env should choke on: unbalanced braces, a stray special token, a NUL byte."""


class EnvCheckError(AssertionError):
    """An env broke the env contract; the message says which row, which completions and what."""


_EpisodeTrace = tuple[list[Message], list[tuple[list[Message], float, bool]], dict[str, float]]


def check_env(
    env_id: str,
    rows: Iterable[Any],
    config: dict[str, Any] | None = None,
    *,
    max_turns: int = 4,
    max_rows: int = 8,
) -> None:
    """Run the conformance checks for ``env_id`` over the first ``max_rows`` of ``rows``.

    ``rows`` are dataset rows: ``aloft.data.DatasetRow`` objects (anything with ``.prompt`` and
    ``.extras``) or raw row dicts as written to a dataset file (``prompt``, ``env_class`` and the
    rest, which becomes ``extras``). Each scripted episode stops when the env says done or after
    ``max_turns`` steps. Raises ``EnvCheckError`` (an ``AssertionError``) on the first violation.
    """
    checked = 0
    for row_index, row in enumerate(rows):
        if checked >= max_rows:
            break
        prompt, extras = _prompt_and_extras(row, env_id, row_index)
        for script_name, completions in _scripts(extras, max_turns).items():
            where = f"check_env({env_id!r}) row {row_index}, completions {script_name!r}"
            _check_episode_pair(env_id, config, prompt, extras, completions, where)
        checked += 1
    if checked == 0:
        raise EnvCheckError(f"check_env({env_id!r}) got no rows; pass at least one dataset row")


def _prompt_and_extras(row: Any, env_id: str, row_index: int) -> tuple[list[Message], dict[str, Any]]:
    if hasattr(row, "prompt") and hasattr(row, "extras"):
        return row.prompt, dict(row.extras)
    if isinstance(row, Mapping) and "prompt" in row:
        extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
        return row["prompt"], extras
    raise TypeError(
        f"check_env({env_id!r}) row {row_index}: expected a DatasetRow or a row dict with a 'prompt', "
        f"got {type(row).__name__}"
    )


def _scripts(extras: Mapping[str, Any], max_turns: int) -> dict[str, list[str]]:
    """Named lists of completions to play, one per turn (the last one repeats if needed)."""
    scripts = {"empty": [""], "garbage": [GARBAGE_COMPLETION]}
    ground_truth = extras.get("answer")
    reward_spec = extras.get("reward_spec")
    if ground_truth is None and isinstance(reward_spec, Mapping):
        ground_truth = reward_spec.get("ground_truth")
    if ground_truth is not None:
        scripts["answer"] = [f"The answer is {ground_truth}."]
        scripts["boxed_answer"] = [f"So the result is \\boxed{{{ground_truth}}}."]
        scripts["garbage_then_answer"] = ["", GARBAGE_COMPLETION, f"The answer is {ground_truth}."]
    return {name: _pad(completions, max_turns) for name, completions in scripts.items()}


def _pad(completions: list[str], length: int) -> list[str]:
    return (completions + [completions[-1]] * length)[:length]


def _check_episode_pair(
    env_id: str,
    config: dict[str, Any] | None,
    prompt: list[Message],
    extras: dict[str, Any],
    completions: list[str],
    where: str,
) -> None:
    fresh_env = _call(
        where, "make()", lambda: make(env_id, config=copy.deepcopy(config), extras=copy.deepcopy(extras))
    )
    first = _play(fresh_env, prompt, completions, where)
    reused = _play(fresh_env, prompt, completions, where + " (same env, second episode)")
    if reused != first:
        raise EnvCheckError(
            f"{where}: a second episode on the same env after reset() differs from the first "
            f"({_first_difference(first, reused)}); reset() must clear all episode state"
        )
    other_env = _call(
        where, "make()", lambda: make(env_id, config=copy.deepcopy(config), extras=copy.deepcopy(extras))
    )
    again = _play(other_env, prompt, completions, where + " (second env)")
    if again != first:
        raise EnvCheckError(
            f"{where}: two envs built from the same row gave different outputs for the same completions "
            f"({_first_difference(first, again)}); envs must be deterministic (seed any randomness from the row)"
        )
    for env in (fresh_env, other_env):
        _call(where, "close()", env.close)
        _call(where, "a second close()", env.close)


def _play(env: Env, prompt: list[Message], completions: list[str], where: str) -> _EpisodeTrace:
    prompt_given = copy.deepcopy(prompt)  # the env gets a copy, so a mutation is seen, not spread
    reset_output = _call(where, "reset()", lambda: env.reset(prompt_given))
    if not (isinstance(reset_output, tuple) and len(reset_output) == 2):
        raise EnvCheckError(
            f"{where}: reset() must return (messages, info), got {type(reset_output).__name__}"
        )
    messages, info = reset_output
    _check_messages(messages, f"{where}: reset() messages")
    if not isinstance(info, dict):
        raise EnvCheckError(f"{where}: reset() info must be a dict, got {type(info).__name__}")
    if prompt_given != prompt:
        raise EnvCheckError(f"{where}: reset() mutated the prompt it was given; copy it before editing")

    steps: list[tuple[list[Message], float, bool]] = []
    for turn, completion in enumerate(completions):
        output = _call(
            where, f"step() on turn {turn}", lambda completion=completion: env.step(completion), _STEP_HINT
        )
        _check_step_output(output, f"{where}: step() on turn {turn}")
        steps.append((copy.deepcopy(output.observations), float(output.reward), output.done))
        if output.done:
            break

    metrics = _call(where, "metrics()", env.metrics)
    if not isinstance(metrics, dict):
        raise EnvCheckError(f"{where}: metrics() must return a dict, got {type(metrics).__name__}")
    for name, value in metrics.items():
        if not isinstance(name, str) or not _is_finite_number(value):
            raise EnvCheckError(
                f"{where}: metrics() entry {name!r}: {value!r} must be a finite float keyed by str"
            )
    return copy.deepcopy(messages), steps, dict(metrics)


def _check_step_output(output: object, what: str) -> None:
    if not isinstance(output, StepOutput):
        raise EnvCheckError(f"{what} must return a StepOutput, got {type(output).__name__}")
    _check_messages(output.observations, f"{what} observations")
    if not _is_finite_number(output.reward):
        raise EnvCheckError(f"{what} returned reward {output.reward!r}; rewards must be finite floats")
    if not isinstance(output.done, bool):
        raise EnvCheckError(
            f"{what} returned done={output.done!r} ({type(output.done).__name__}); it must be a bool"
        )
    if not isinstance(output.info, dict):
        raise EnvCheckError(f"{what} returned info of type {type(output.info).__name__}; it must be a dict")
    try:
        json.dumps(output.info)
    except (TypeError, ValueError) as error:
        raise EnvCheckError(
            f"{what} returned info that is not JSON-serialisable ({error}); it is logged as JSON"
        ) from None


def _check_messages(messages: object, what: str) -> None:
    if not isinstance(messages, list):
        raise EnvCheckError(f"{what} must be a list of messages, got {type(messages).__name__}")
    for position, message in enumerate(messages):
        if not isinstance(message, dict):
            raise EnvCheckError(f"{what}[{position}] must be a dict message, got {type(message).__name__}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise EnvCheckError(
                    f"{what}[{position}] needs a str {key!r}, got {type(message.get(key)).__name__}"
                )


def _is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _call(where: str, what: str, function: Callable[[], Any], hint: str = "") -> Any:
    try:
        return function()
    except EnvCheckError:
        raise
    except Exception as error:
        raise EnvCheckError(f"{where}: {what} raised {type(error).__name__}: {error}{hint}") from error


_STEP_HINT = "; envs must turn malformed completions into a reward or an observation, not an exception"


def _first_difference(expected: _EpisodeTrace, actual: _EpisodeTrace) -> str:
    expected_messages, expected_steps, expected_metrics = expected
    actual_messages, actual_steps, actual_metrics = actual
    if expected_messages != actual_messages:
        return "reset() messages differ"
    for turn, (want, got) in enumerate(zip(expected_steps, actual_steps)):
        if want != got:
            return f"turn {turn}: {_describe_step(want)} vs {_describe_step(got)}"
    if len(expected_steps) != len(actual_steps):
        return f"episode lengths {len(expected_steps)} vs {len(actual_steps)} turns"
    return f"metrics {expected_metrics} vs {actual_metrics}"


def _describe_step(step: tuple[list[Message], float, bool]) -> str:
    observations, reward, done = step
    return f"(reward={reward}, done={done}, {len(observations)} observations)"
