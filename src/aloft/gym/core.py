"""The environment contract and the env registry (docs/reference/design.md §3). Torch-free.

An episode, as the generator drives it::

    env = make(row.env_class, config=env_config, extras=row.extras)
    observation, info = env.reset(row.prompt)         # the messages the model sees first
    while True:
        completion_text = ...                         # the policy's reply to everything so far
        out = env.step(completion_text)               # StepOutput(observations, reward, done, info)
        if out.done:
            break
        # out.observations (user / tool messages) are appended to the conversation; loop again
    episode_metrics = env.metrics()
    env.close()

``reward`` is the reward for the turn that ``step`` just judged; the episode return is the sum over
turns. The env decides when an episode is over (``done``); envs that allow several turns read their
limit from ``config["max_turns"]`` by convention. The generator enforces its own turn and token
limits on top and reports a truncated episode as such (``RolloutStatus.LENGTH``), so an env never
needs to guess the generator's budget.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from aloft.plugin_settings import checked_model, validated_settings
from aloft.registry import ENV_OVERLAYS
from aloft.types import Message

__all__ = [
    "Env",
    "EnvFactory",
    "StepOutput",
    "UnknownEnvError",
    "make",
    "overlay_of",
    "params_of",
    "register",
    "registered",
]


@dataclass
class StepOutput:
    """What ``Env.step`` returns for one policy turn."""

    observations: list[Message]
    """Messages the env appends to the conversation (e.g. a user follow-up or a tool result); empty
    when the env has nothing to say (always the case when ``done`` is True, by convention)."""
    reward: float
    """Reward for this turn: a finite float. Multi-turn envs often give 0 until the final turn."""
    done: bool
    """True when the episode is over and the generator must not call ``step`` again."""
    info: dict[str, Any] = field(default_factory=dict)
    """JSON-serialisable details for logging (extracted answer, ground truth, ...)."""


class Env(ABC):
    """Base class of every environment.

    Subclasses implement ``step`` and usually ``reset`` and ``metrics``. They are constructed as
    ``Env(config, extras)``:

    - ``config``: the env's settings for the whole run (``env.config``, merged over the defaults
      given to ``register``; an env registered with ``params=`` gets them validated, its model's
      defaults filled in). Multi-turn envs read their turn limit from ``max_turns``.
    - ``extras``: the dataset row's env fields (every free column plus ``reward_spec`` and
      ``extra_info``), i.e. what this one episode is about (question, ground truth, DB path, ...).

    One instance runs one episode at a time; ``reset`` starts a new one. Envs must be
    deterministic given (config, extras, prompt, actions): ``check_env`` verifies it.
    Malformed model output is the env's normal input: turn it into a low reward or a corrective
    observation, never an exception.
    """

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        # Copies, so an env that edits its config/extras never leaks into the next episode's row.
        self.config: dict[str, Any] = dict(config or {})
        self.extras: dict[str, Any] = dict(extras or {})
        self._closed = False

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode from the row's prompt; return the messages the model sees, and info.

        The default returns (a copy of) the prompt unchanged and an empty info dict. Overrides may
        add a system message, tool descriptions, etc. Never mutate ``prompt`` itself: it is the
        dataset's row, reused every epoch.
        """
        return [dict(message) for message in prompt], {}  # type: ignore[misc]

    @abstractmethod
    def step(self, action: str) -> StepOutput:
        """Judge one policy turn (the decoded completion text) and say what happens next."""

    def metrics(self) -> dict[str, float]:
        """Episode metrics (e.g. ``format_ok``, ``correct``, ``turns``), finite floats; the
        generator averages them over a batch. Default: none."""
        return {}

    def close(self) -> None:
        """Release resources (connections, sandboxes). Idempotent: calling it twice is fine."""
        self._closed = True

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


EnvFactory = Callable[..., Env]
"""Anything called as ``factory(config=..., extras=...)`` that returns an ``Env`` (a subclass works)."""


class UnknownEnvError(KeyError):
    """``make`` was asked for an id nobody registered."""

    def __str__(self) -> str:  # KeyError would otherwise print the message wrapped in quotes
        return str(self.args[0])


@dataclass(frozen=True)
class _Registration:
    entry_point: str | EnvFactory
    defaults: dict[str, Any]
    params: type[BaseModel] | None = None


_REGISTRY: dict[str, _Registration] = {}


def register(
    env_id: str,
    entry_point: str | EnvFactory,
    *,
    override: bool = False,
    params: type[BaseModel] | None = None,
    overlay: dict[str, Any] | None = None,
    **defaults: Any,
) -> None:
    """Register an env under ``env_id``.

    ``entry_point`` is either ``"package.module:ClassName"`` (imported lazily, on the first
    ``make``, so registering costs nothing) or a callable ``(config=..., extras=...) -> Env``.
    ``defaults`` are config values merged *under* the config given to ``make``.
    ``params``: the env's own settings, a pydantic model; ``env.config`` is checked against it before
    a run's model loads (one line naming the key), and the env's ``config`` holds the validated
    values with the model's defaults filled in.
    ``overlay``: the run settings the env wants when a run selects it (``env=ENV_ID``), as config
    sections, e.g. ``{"generator": {"max_turns": 2, "stop": ["</tool>"]}}``; merged over the preset,
    under the command line's own overrides (the built-in envs keep theirs in
    ``aloft/config/presets/envs/``).
    Registering an id twice raises ``ValueError`` unless ``override=True``.
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env id must be a non-empty string, got {env_id!r}")
    if isinstance(entry_point, str):
        module_name, sep, attr = entry_point.partition(":")
        if not sep or not module_name or not attr:
            raise ValueError(
                f"env '{env_id}': entry point {entry_point!r} must look like 'package.module:ClassName'"
            )
    elif not callable(entry_point):
        raise TypeError(
            f"env '{env_id}': entry point must be 'module:Class' or a callable, got {type(entry_point).__name__}"
        )
    if env_id in _REGISTRY and not override:
        raise ValueError(
            f"env id '{env_id}' is already registered; pass override=True to replace it or pick another id"
        )
    if overlay is not None and not isinstance(overlay, dict):
        raise TypeError(f"env '{env_id}': overlay= must be a mapping of config sections, got {overlay!r}")
    _REGISTRY[env_id] = _Registration(
        entry_point=entry_point, defaults=dict(defaults), params=checked_model(f"env '{env_id}'", params)
    )
    ENV_OVERLAYS.pop(env_id, None)
    if overlay is not None:
        ENV_OVERLAYS[env_id] = overlay


def register_env(
    env_id: str,
    *,
    params: type[BaseModel] | None = None,
    overlay: dict[str, Any] | None = None,
    **defaults: Any,
) -> Callable[[type[Env]], type[Env]]:
    """Class decorator: ``register(env_id, cls, params=..., overlay=..., **defaults)``, the same style
    as the other extension points (``@register_policy_loss``, ``@register_plan``, ...). Returns the
    class unchanged."""

    def decorator(cls: type[Env]) -> type[Env]:
        existing = _REGISTRY.get(env_id)
        if existing is not None and existing.entry_point is cls:  # a module imported twice
            return cls
        register(env_id, cls, params=params, overlay=overlay, **defaults)
        return cls

    return decorator


def params_of(env_id: str) -> type[BaseModel] | None:
    """The settings model the env ``env_id`` declared (``params=``), if any (None when unregistered)."""
    registration = _REGISTRY.get(env_id)
    return registration.params if registration is not None else None


def overlay_of(env_id: str) -> dict[str, Any] | None:
    """The run settings the env ``env_id`` registered (``overlay=``), if any."""
    return ENV_OVERLAYS.get(env_id)


def registered() -> list[str]:
    """The registered env ids, sorted."""
    return sorted(_REGISTRY)


def make(env_id: str, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> Env:
    """Build the env registered as ``env_id``: ``factory(config={**defaults, **config}, extras=extras)``."""
    registration = _REGISTRY.get(env_id)
    if registration is None:
        raise UnknownEnvError(
            f"unknown env id {env_id!r}; registered envs: {registered()}. "
            "Register it with aloft.gym.register(id, 'module:Class') or fix the row's env_class"
        )
    factory = _resolve(env_id, registration.entry_point)
    merged = {**registration.defaults, **(config or {})}
    if registration.params is not None:  # validated, the model's defaults filled in
        merged.update(
            validated_settings("env.config", f"env {env_id}", registration.params, merged).model_dump()
        )
    env = factory(config=merged, extras=dict(extras or {}))
    if not isinstance(env, Env):
        raise TypeError(
            f"env '{env_id}': the entry point returned {type(env).__name__}, not an aloft.gym.Env; "
            "subclass Env or return an instance of one"
        )
    return env


def _resolve(env_id: str, entry_point: str | EnvFactory) -> EnvFactory:
    if not isinstance(entry_point, str):
        return entry_point
    module_name, _, attr = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(
            f"env '{env_id}': cannot import module '{module_name}' of entry point '{entry_point}' ({error})"
        ) from error
    factory = getattr(module, attr, None)
    if factory is None:
        raise ImportError(f"env '{env_id}': module '{module_name}' has no attribute '{attr}'")
    return factory
