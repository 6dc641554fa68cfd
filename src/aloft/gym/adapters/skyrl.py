"""Run skyrl-gym's environments (the ``skyrl-gym`` package) unchanged inside aloft.

skyrl-gym's text envs (``BaseTextEnv``) speak almost the same protocol as ``aloft.gym.Env``:

- ``skyrl_gym.make(id, env_config=..., extras=...)`` -> ``make("skyrl/<id>", config=..., extras=...)``
- ``env.init(prompt) -> (prompt, metadata)`` -> ``reset(prompt) -> (messages, info)``
- ``env.step(action) -> {observations, reward, done, metadata, postprocessed_action}`` ->
  ``step(action) -> StepOutput(observations, reward, done, info)``
- ``env.get_metrics()`` -> ``metrics()``; ``env.close()`` -> ``close()``

Usage::

    from aloft.gym import make
    from aloft.gym.adapters import register_skyrl_envs

    register_skyrl_envs()        # every id in skyrl_gym's registry, as "skyrl/<id>"
    env = make("skyrl/gsm8k", extras={"reward_spec": {"method": "rule", "ground_truth": "72"}})
    env.reset([{"role": "user", "content": "..."}])
    env.step("... #### 72")      # StepOutput(observations=[], reward=1.0, done=True, info={})

or, for one env under an id of your choosing, ``register("my_gsm8k", skyrl_env("gsm8k"))``.

Rows. SkyRL's rows and aloft's are the same format (docs/reference/design.md §4): ``prompt``, ``env_class``,
``reward_spec {method, ground_truth}``, ``extra_info`` and free columns. skyrl-train hands an env the
row minus ``prompt`` and ``env_class`` as ``extras`` — exactly aloft's ``extras`` — so a SkyRL row
works once its ``env_class`` names the aloft id (``"skyrl/gsm8k"``; or register with ``prefix=""``
for ids that do not clash with aloft's own, and the files run as they are).

Config. The aloft env config (``env.config`` in a training config, merged over the registration
defaults) is split in two:

- ``skyrl_env_id``: which skyrl-gym env to run: a registered skyrl-gym id, or a
  ``"package.module:EnvClass"`` entry point of an unregistered one. Set for you by
  ``register_skyrl_envs`` and ``skyrl_env``.
- ``max_turns``: when given, copied into ``extras["max_turns"]`` for every episode, as skyrl-train's
  generator does with its own turn limit (skyrl-gym's multi-turn envs read their limit there).
  Without it a row's own ``max_turns`` column, or else the env's default, applies. aloft's
  generator has its own limit on top (``generator.max_turns``): set both.
- everything else is the skyrl-gym ``env_config`` (skyrl-train's ``environment.skyrl_gym.<id>``
  section), handed over as an OmegaConf ``DictConfig`` as skyrl-train does, over the defaults of
  the env's own config dataclass when it declares one (``SearchEnvConfig``: ``search_url``, ``topk``,
  ``timeout``, ``log_requests``; ``Text2SQLEnvConfig``: ``db_path``) — the same values as
  skyrl-train's ``skyrl_gym_config/default.yaml``.

Episodes. A skyrl-gym env object runs one episode (its turn counter and chat history live on the
object), while an aloft env is reset and reused; so ``reset`` builds a fresh skyrl-gym env for every
episode (the one built by the constructor, which fails early on bad extras, serves the first).

Values. ``reward`` becomes a float: ``None`` is 0.0, a list (or array) of numbers is summed and the
parts are kept in ``info["reward_components"]``; a non-finite reward raises. ``observations`` of
``None`` become ``[]``. ``info`` is the step's ``metadata`` made JSON-safe (tuples and sets to lists,
NumPy values to Python ones, anything else to ``str``). A non-None ``postprocessed_action`` (skyrl-train
then retokenizes the rewritten text, which breaks token-in/token-out) cannot be honoured by aloft,
which trains on the tokens the policy sampled: it is reported in ``info["postprocessed_action"]`` and
logged, never silently dropped. ``metrics()`` are the numeric entries of ``get_metrics()`` (skyrl's
own ``aggregate_metrics`` also drops the others); aloft averages them over a batch.

``skyrl_gym`` is imported only when one of these envs is built (or ``register_skyrl_envs()`` reads
its registry), never by ``import aloft.gym``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import math
import typing
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from aloft.gym.core import Env, StepOutput, register, registered
from aloft.types import Message

__all__ = [
    "SKYRL_BUILTIN_ENV_IDS",
    "UNSANDBOXED_CODE_ENV_IDS",
    "SkyRLEnv",
    "SkyRLEnvError",
    "register_skyrl_envs",
    "skyrl_env",
]

logger = logging.getLogger(__name__)

SKYRL_BUILTIN_ENV_IDS: tuple[str, ...] = (
    "aime",
    "gsm8k",
    "gsm8k_multi_turn",
    "lcb",
    "search",
    "searchcode",
    "text2sql",
)
"""The envs skyrl-gym 0.4 registers on import; ``register_skyrl_envs(SKYRL_BUILTIN_ENV_IDS)`` registers
them in aloft without importing skyrl_gym."""

UNSANDBOXED_CODE_ENV_IDS: frozenset[str] = frozenset({"lcb", "searchcode"})
"""skyrl-gym envs that run model-written code with a plain subprocess (no sandbox). aloft refuses to
build them unless the env config says ``allow_unsandboxed_code: true``; prefer aloft's ``code`` envs,
which run code in ``aloft.gym.sandbox``."""

ENTRY_POINT = "aloft.gym.adapters.skyrl:SkyRLEnv"
_ADAPTER_KEYS = ("skyrl_env_id", "max_turns", "allow_unsandboxed_code")
_INSTALL_HINT = "pip install skyrl-gym"
_registered_here: set[str] = set()
_warned_postprocessed: set[str] = set()


class SkyRLEnvError(RuntimeError):
    """A skyrl-gym env could not be built or broke the skyrl-gym step contract."""


def _skyrl_gym() -> ModuleType:
    try:
        import skyrl_gym
    except ImportError as error:
        raise ImportError(
            f"the skyrl-gym adapter needs the skyrl-gym package ({error}); install it with `{_INSTALL_HINT}`"
        ) from error
    return skyrl_gym


class SkyRLEnv(Env):
    """An aloft ``Env`` that runs one skyrl-gym env, chosen by ``config["skyrl_env_id"]``.

    See the module docstring for how config, extras, rewards, info and metrics map.
    """

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        env_id = self.config.get("skyrl_env_id")
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(
                f"SkyRLEnv needs config['skyrl_env_id'] (a skyrl-gym env id such as 'gsm8k'), got {env_id!r}; "
                "register skyrl-gym envs with register_skyrl_envs() or skyrl_env(env_id)"
            )
        if env_id in UNSANDBOXED_CODE_ENV_IDS and self.config.get("allow_unsandboxed_code") is not True:
            raise SkyRLEnvError(
                f"skyrl-gym env {env_id!r} runs model-written code without a sandbox; use aloft's 'code' env, "
                "or set env config allow_unsandboxed_code=true on a machine you can lose"
            )
        self.skyrl_env_id = env_id
        skyrl_gym = _skyrl_gym()
        self._spec = _find_spec(skyrl_gym, env_id)
        self._skyrl_extras = dict(self.extras)
        if self.config.get("max_turns") is not None:
            self._skyrl_extras["max_turns"] = self.config["max_turns"]
        user_env_config = {key: value for key, value in self.config.items() if key not in _ADAPTER_KEYS}
        self._env_config = {**_default_env_config(self._spec.entry_point), **user_env_config}
        self._inner: Any = self._build()
        self._fresh = True  # the constructor's skyrl env has not started an episode yet

    # ---- the aloft Env contract ------------------------------------------------------------------
    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        if self._inner is None or not self._fresh:
            self._close_inner()
            self._inner = self._build()
        self._fresh = False
        result = self._inner.init(copy.deepcopy(list(prompt)))
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise SkyRLEnvError(
                f"skyrl-gym env {self.skyrl_env_id!r}: init() must return (prompt, metadata), "
                f"got {type(result).__name__}"
            )
        messages, metadata = result
        return _messages(messages, self.skyrl_env_id, "init()"), _info(metadata)

    def step(self, action: str) -> StepOutput:
        if self._inner is None:
            raise RuntimeError(f"skyrl env {self.skyrl_env_id!r}: step() after close(); call reset() first")
        self._fresh = False
        output = self._inner.step(action)
        if not isinstance(output, Mapping):
            raise SkyRLEnvError(
                f"skyrl-gym env {self.skyrl_env_id!r}: step() must return a BaseTextEnvStepOutput dict, "
                f"got {type(output).__name__}"
            )
        info = _info(output.get("metadata"))
        reward, components = _reward(output.get("reward"), self.skyrl_env_id)
        if components is not None:
            info["reward_components"] = components
        postprocessed = output.get("postprocessed_action")
        if postprocessed is not None:
            info["postprocessed_action"] = str(postprocessed)
            if self.skyrl_env_id not in _warned_postprocessed:
                _warned_postprocessed.add(self.skyrl_env_id)
                logger.warning(
                    "skyrl-gym env %r returned a postprocessed_action; aloft trains on the tokens the "
                    "policy sampled and only reports it in StepOutput.info['postprocessed_action']",
                    self.skyrl_env_id,
                )
        return StepOutput(
            observations=_messages(output.get("observations"), self.skyrl_env_id, "step() observations"),
            reward=reward,
            done=bool(output.get("done")),
            info=info,
        )

    def metrics(self) -> dict[str, float]:
        if self._inner is None:
            return {}
        get_metrics = getattr(self._inner, "get_metrics", None)
        if get_metrics is None:
            return {}
        raw = get_metrics() or {}
        metrics: dict[str, float] = {}
        for name, value in dict(raw).items():
            number = _number(value)
            if number is not None and math.isfinite(number):
                metrics[str(name)] = number
        return metrics

    def close(self) -> None:
        self._close_inner()
        super().close()

    def __repr__(self) -> str:
        return f"SkyRLEnv({self.skyrl_env_id!r})"

    # ---- helpers ---------------------------------------------------------------------------------
    def _build(self) -> Any:
        skyrl_gym = _skyrl_gym()
        from omegaconf import OmegaConf  # a dependency of skyrl-gym

        try:
            extras = copy.deepcopy(self._skyrl_extras)
        except Exception:  # an uncopyable extra (a lock, a client): share it rather than fail
            extras = dict(self._skyrl_extras)
        try:
            env_config = OmegaConf.create(copy.deepcopy(self._env_config))
            return skyrl_gym.make(self._spec, env_config=env_config, extras=extras)
        except Exception as error:
            raise SkyRLEnvError(
                f"skyrl-gym env {self.skyrl_env_id!r} could not be built from env_config "
                f"{sorted(self._env_config)} and extras {sorted(extras)}: {type(error).__name__}: {error}"
            ) from error

    def _close_inner(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.close()


def skyrl_env(env_id: str) -> Callable[..., SkyRLEnv]:
    """A factory for ``aloft.gym.register``: ``register("my_math", skyrl_env("gsm8k"))``.

    ``env_id`` is a skyrl-gym registry id or a ``"package.module:EnvClass"`` entry point.
    """
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"skyrl_env() needs a skyrl-gym env id, got {env_id!r}")

    def factory(config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> SkyRLEnv:
        return SkyRLEnv({**(config or {}), "skyrl_env_id": env_id}, extras)

    factory.__name__ = factory.__qualname__ = f"skyrl_env_{env_id}"
    return factory


def register_skyrl_envs(
    env_ids: Iterable[str] | None = None, *, prefix: str = "skyrl/", override: bool = False
) -> list[str]:
    """Register skyrl-gym envs in aloft as ``prefix + skyrl_id``; return the aloft ids.

    ``env_ids=None`` reads skyrl_gym's registry (importing skyrl_gym; import the modules that
    register your own skyrl-gym envs first). Given ids, nothing is imported: the registrations are
    lazy entry points and skyrl_gym is imported by the first ``make``. Calling it again is a no-op
    for the ids it registered already; an aloft id that something else registered raises, unless
    ``override=True``.
    """
    ids = sorted(_skyrl_gym().registry) if env_ids is None else list(env_ids)
    known = set(registered())
    aloft_ids = []
    for skyrl_id in ids:
        if not isinstance(skyrl_id, str) or not skyrl_id:
            raise ValueError(f"skyrl-gym env ids must be non-empty strings, got {skyrl_id!r}")
        aloft_id = prefix + skyrl_id
        if aloft_id in known and aloft_id in _registered_here and not override:
            aloft_ids.append(aloft_id)
            continue
        register(aloft_id, ENTRY_POINT, override=override, skyrl_env_id=skyrl_id)
        _registered_here.add(aloft_id)
        aloft_ids.append(aloft_id)
    return aloft_ids


# ---- conversions -------------------------------------------------------------------------------
def _find_spec(skyrl_gym: ModuleType, env_id: str) -> Any:
    spec = skyrl_gym.registry.get(env_id)
    if spec is not None:
        return spec
    if ":" in env_id:
        from skyrl_gym.envs.registration import EnvSpec

        return EnvSpec(id=env_id, entry_point=env_id)
    raise SkyRLEnvError(
        f"unknown skyrl-gym env id {env_id!r}; skyrl_gym's registry has {sorted(skyrl_gym.registry)}. "
        "Import the module that registers it, or give a 'package.module:EnvClass' entry point"
    )


def _default_env_config(entry_point: Any) -> dict[str, Any]:
    """The defaults of the config dataclass an env declares for ``env_config``
    (``Union[SearchEnvConfig, DictConfig]``), or ``{}``."""
    try:
        if isinstance(entry_point, str):
            from skyrl_gym.envs.registration import load_env_creator

            entry_point = load_env_creator(entry_point)
        try:
            signature = inspect.signature(entry_point, eval_str=True)
        except Exception:  # an annotation that does not evaluate
            signature = inspect.signature(entry_point)
        annotation = signature.parameters["env_config"].annotation
    except Exception:  # no such parameter, not introspectable, not importable (make() will say why)
        return {}
    for candidate in typing.get_args(annotation) or (annotation,):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            try:
                return dataclasses.asdict(candidate())
            except TypeError:  # required fields: no defaults to offer
                continue
    return {}


def _messages(value: Any, env_id: str, what: str) -> list[Message]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise SkyRLEnvError(
            f"skyrl-gym env {env_id!r}: {what} must be a list of messages, got {type(value).__name__}"
        )
    messages: list[Message] = []
    for position, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise SkyRLEnvError(
                f"skyrl-gym env {env_id!r}: {what}[{position}] must be a {{role, content}} dict, "
                f"got {type(message).__name__}"
            )
        converted = copy.deepcopy(dict(message))
        if converted.get("content") is None:
            converted["content"] = ""
        messages.append(converted)  # type: ignore[arg-type]
    return messages


def _number(value: Any) -> float | None:
    if hasattr(value, "tolist") and not isinstance(value, list | tuple):  # NumPy scalars and arrays
        value = value.tolist()
    if isinstance(value, bool | int | float):
        return float(value)
    return None


def _reward(value: Any, env_id: str) -> tuple[float, list[float] | None]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    components: list[float] | None = None
    if value is None:
        reward = 0.0
    elif isinstance(value, list | tuple):
        components = []
        for part in value:
            number = _number(part)
            if number is None:
                raise SkyRLEnvError(f"skyrl-gym env {env_id!r}: reward {value!r} is not a list of numbers")
            components.append(number)
        reward = float(sum(components))
    else:
        number = _number(value)
        if number is None:
            raise SkyRLEnvError(f"skyrl-gym env {env_id!r}: reward {value!r} is not a number")
        reward = number
    if not math.isfinite(reward):
        raise SkyRLEnvError(f"skyrl-gym env {env_id!r}: reward {value!r} is not finite")
    return reward, components


def _info(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        return {"metadata": _jsonable(metadata)}
    return {str(key): _jsonable(value) for key, value in metadata.items()}


def _jsonable(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 32:
        return str(value)
    if hasattr(value, "tolist"):  # NumPy scalars and arrays
        return _jsonable(value.tolist(), depth + 1)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        items = [_jsonable(item, depth + 1) for item in value]
        return sorted(items, key=repr)
    if isinstance(value, list | tuple):
        return [_jsonable(item, depth + 1) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
