"""Checks that run before a model loads: a bad setting fails in seconds, as one line, not after minutes.

``build_components`` calls these in order: the user's ``trainer.imports`` import, the registry names
exist (estimator, loss, plan, env, engine backend; ``check_names``), the devices exist
(``check_devices``), the model path resolves, the data files read
and validate, every row's ``env_class`` is registered and its env builds on the first row of each
class (with ``env.config``; built and reset with the row's prompt), and the generator's turn limit is not below an env's own. Each failure
is a ``ConfigError`` naming the key and the fix; ``aloft train`` prints it as one line and exits 2.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aloft import algorithms, gym
from aloft.config import AloftConfig, ConfigError
from aloft.config.loading import import_plugins as import_modules
from aloft.data import DatasetRow
from aloft.inference.base import registered_engines
from aloft.models import resolve_model_path
from aloft.models.device import resolve_device
from aloft.models.loading import ModelUnavailableError
from aloft.plugin_settings import check_settings
from aloft.trainer.plans import check_plan_params, make_plan, registered_plans

T = TypeVar("T")
logger = logging.getLogger(__name__)


def import_plugins(cfg: AloftConfig) -> None:
    """Import ``trainer.imports`` (user modules that register envs, estimators, losses, plans)."""
    import_modules(cfg.trainer.imports)


def check_names(cfg: AloftConfig) -> None:
    """Registry names in the config exist (config itself cannot import the registries)."""
    algo = cfg.algorithm
    if algo.advantage not in algorithms.advantage_estimators:
        raise ConfigError(
            f"algorithm.advantage={algo.advantage} is not a registered estimator; known: "
            f"{sorted(algorithms.advantage_estimators)}"
        )
    if algo.policy_loss not in algorithms.policy_losses:
        raise ConfigError(
            f"algorithm.policy_loss={algo.policy_loss} is not a registered loss; known: {sorted(algorithms.policy_losses)}"
        )
    try:
        algorithms.check_algorithm_params(algo.advantage, algo.policy_loss, algo.params)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if cfg.trainer.plan not in registered_plans():
        raise ConfigError(
            f"trainer.plan={cfg.trainer.plan} is not a registered plan; known: {registered_plans()}"
        )
    try:
        check_plan_params(cfg.trainer.plan, cfg.trainer.plan_params)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if (
        make_plan(cfg.trainer.plan, cfg.trainer.plan_params).off_policy
        and algo.off_policy_correction == "none"
    ):
        raise ConfigError(
            f"trainer.plan={cfg.trainer.plan} trains on samples from older policy versions, and "
            f"algorithm.policy_loss={algo.policy_loss} needs them corrected: set "
            "algorithm.off_policy_correction=tis_token (or tis_sequence, geo_mask)"
        )
    if cfg.env.name is not None and cfg.env.name not in gym.registered():
        raise ConfigError(f"env.name={cfg.env.name} is not a registered env; known: {gym.registered()}")
    if cfg.engine.backend not in registered_engines():
        raise ConfigError(
            f"engine.backend={cfg.engine.backend} is not a known inference engine; known: "
            f"{registered_engines()} (register your own with aloft.inference.register_engine)"
        )


def check_devices(cfg: AloftConfig) -> None:
    """``trainer.device`` (and an hf engine's ``engine.device``) name a device this process has, and
    settings that need a GPU get one (a config written for a GPU machine, run on a CPU one)."""
    if cfg.placement.backend == "ray":
        return  # learner and engine actors resolve their devices where Ray places them
    try:
        device = resolve_device(cfg.trainer.device)
        if cfg.engine.backend == "hf" and cfg.placement.backend == "local":
            resolve_device(cfg.engine.device, key="engine.device")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if cfg.trainer.fsdp_cpu_offload and device.type == "cpu":
        raise ConfigError(
            f"trainer.fsdp_cpu_offload moves GPU state to CPU memory, but trainer.device={cfg.trainer.device} "
            "resolved to the CPU (torch sees no GPU): set trainer.fsdp_cpu_offload=false"
        )


def resolve_model(cfg: AloftConfig) -> str:
    """``model.path`` resolved to something loadable, or a one-line ``ConfigError``."""
    try:
        return resolve_model_path(cfg.model.path)
    except ModelUnavailableError as error:
        raise ConfigError(f"model.path={cfg.model.path}: {error}") from None


def read_data(key: str, read: Callable[[], T]) -> T:
    """``read()`` (rows from files or a builder), with a missing file or a bad row as one line."""
    try:
        return read()
    except (FileNotFoundError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{key}: {error}") from None


def check_envs(cfg: AloftConfig, train_rows: list[DatasetRow], eval_rows: list[DatasetRow]) -> None:
    """Every row's env is registered and builds on the first row of its class (in each split);
    the generator's turn limit reaches each env's own (``max_turns``, by the gym's convention)."""
    firsts: dict[str, dict[str, DatasetRow]] = {}
    for split, rows in (("train", train_rows), ("eval", eval_rows)):
        first = firsts[split] = {}
        for row in rows:
            env_class = row.env_class or cfg.env.name
            if env_class is None:
                raise ConfigError(
                    f"{split} row {row.index} has no env_class: add the column, or set env.name=ENV_ID "
                    f"for every row; known envs: {gym.registered()}"
                )
            if env_class not in gym.registered():
                raise ConfigError(
                    f"{split} row {row.index}: env_class={env_class!r} is not a registered env; known: "
                    f"{gym.registered()} (register your own and list its module in trainer.imports)"
                )
            first.setdefault(env_class, row)
    # One env.config reaches every env of the run, in either split: check it against all of them.
    check_env_settings(cfg, sorted({env_class for first in firsts.values() for env_class in first}))
    for split, first in firsts.items():
        for env_class, row in first.items():
            _check_env(cfg, split, env_class, row)


def check_env_settings(cfg: AloftConfig, env_classes: list[str]) -> None:
    """``env.config`` against the settings the run's envs declared (``params=`` at registration):
    a bad value fails as one line; so does an unknown key, when every one of them declared its own."""
    selected = {f"env {env_class}": gym.params_of(env_class) for env_class in env_classes}
    try:
        check_settings("env.config", selected, cfg.env.config, undeclared_readers=True)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _check_env(cfg: AloftConfig, split: str, env_class: str, row: DatasetRow) -> None:
    """Build the env on ``row`` and reset it with the row's prompt, as an episode would start."""
    env = None
    try:
        env = gym.make(env_class, cfg.env.config, row.extras)
        env.reset(list(row.prompt))
    except Exception as error:
        raise ConfigError(
            f"env {env_class} cannot start an episode on {split} row {row.index}: {_one_line(error)}; "
            "check env.config and the row's columns"
        ) from None
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as error:  # as in the generator: a close that fails loses nothing
                logger.warning("env %s close failed: %r", env_class, error)
    limit: Any = getattr(env, "max_turns", None)
    turns = cfg.generator.max_turns
    if isinstance(limit, int) and not isinstance(limit, bool) and turns < limit:
        raise ConfigError(
            f"generator.max_turns={turns} is below the {env_class} env's max_turns={limit} ({split} row "
            f"{row.index}): episodes would be cut before the env's last turn; set generator.max_turns="
            f"{limit} (or lower the env's max_turns)"
        )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
