"""Name -> implementation tables for advantage estimators and policy losses.

A config names an estimator (``algorithm.advantage``) and a policy loss (``algorithm.policy_loss``);
the trainer looks both up here. Adding an algorithm is one decorated function, no trainer edit::

    from aloft.algorithms import register_policy_loss

    @register_policy_loss("my_loss")
    def my_loss(logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None):
        ...
        return loss, {"clip_frac": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0}

The module that defines the function must be imported before the config is validated.

An estimator or a loss may declare settings of its own: a pydantic model given as ``params=`` at
registration. The user sets them under ``algorithm.params`` (``algorithm.params.beta=0.1``), they
are checked before training starts (``check_algorithm_params``), and the function receives them,
defaults filled in, as its ``params`` keyword::

    class MyLossParams(BaseModel):
        beta: float = 0.1  # its doc: a Field(description=...) or an attribute docstring

    @register_policy_loss("my_loss", params=MyLossParams)
    def my_loss(logprobs, ..., *, normalizer=None, params):
        ... params.beta ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch
from pydantic import BaseModel

from aloft.algorithms.reductions import LossNormalizer
from aloft.plugin_settings import check_settings, checked_model, settings_of
from aloft.registry import lookup, register


class AdvantageEstimator(Protocol):
    """``(rewards, loss_mask, group_ids, values, config) -> (advantages, returns)``.

    Args:
        rewards: ``[B, T]`` token rewards (each turn's reward on its last policy token, 0 elsewhere).
        loss_mask: ``[B, T]``, 1 = policy token, 0 = env observation or padding.
        group_ids: ``[B]`` long; samples of one prompt share an id.
        values: ``[B, T]`` critic values, or None for critic-free estimators.
        config: any object with the algorithm fields (``gamma``, ``lam``, ``norm_adv_by_std``, ...).

    Returns:
        ``advantages`` and ``returns``, both ``[B, T]`` and 0 where ``loss_mask`` is 0.
    """

    def __call__(
        self,
        rewards: torch.Tensor,
        loss_mask: torch.Tensor,
        group_ids: torch.Tensor,
        values: torch.Tensor | None,
        config: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class PolicyLoss(Protocol):
    """``(logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None)
    -> (loss, metrics)``.

    All tensors are ``[B, T]``. ``loss`` is a scalar with grad through ``logprobs``; ``metrics`` maps names
    to floats and holds at least ``clip_frac``, ``approx_kl`` and ``ratio_mean``. ``normalizer`` carries
    the whole mini-batch's counts so micro-batch losses add up to the mini-batch loss.
    """

    def __call__(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        loss_mask: torch.Tensor,
        config: Any,
        sampler_logprobs: torch.Tensor | None = None,
        *,
        normalizer: LossNormalizer | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


advantage_estimators: dict[str, AdvantageEstimator] = {}
"""Every registered advantage estimator by name (built-ins register on ``import aloft.algorithms``)."""

policy_losses: dict[str, PolicyLoss] = {}
"""Every registered policy loss by name (built-ins register on ``import aloft.algorithms``)."""

_F = TypeVar("_F", bound=Callable[..., Any])


_PARAMS: dict[tuple[str, str], type[BaseModel]] = {}
"""(kind, name) -> the settings model a plugin declared (``params=`` at registration)."""

ESTIMATOR, LOSS = "advantage estimator", "policy loss"


def register_advantage_estimator(name: str, *, params: type[BaseModel] | None = None) -> Callable[[_F], _F]:
    """Decorator: register ``fn`` as the advantage estimator ``name``; ``params``: its own settings
    (a pydantic model, set under ``algorithm.params``). A taken name raises ValueError."""
    return _with_params(
        register(advantage_estimators, ESTIMATOR, "register_advantage_estimator", name),
        ESTIMATOR,
        name,
        params,
    )


def register_policy_loss(name: str, *, params: type[BaseModel] | None = None) -> Callable[[_F], _F]:
    """Decorator: register ``fn`` as the policy loss ``name``; ``params``: its own settings (a
    pydantic model, set under ``algorithm.params``). A taken name raises ValueError."""
    return _with_params(register(policy_losses, LOSS, "register_policy_loss", name), LOSS, name, params)


def _with_params(
    decorator: Callable[[_F], _F], kind: str, name: str, params: type[BaseModel] | None
) -> Callable[[_F], _F]:
    checked_model(f"{kind} {name!r}", params)

    def register_with_params(fn: _F) -> _F:
        fn = decorator(fn)
        if params is not None:
            _PARAMS[(kind, name)] = params
        return fn

    return register_with_params


def params_model(kind: str, name: str) -> type[BaseModel] | None:
    """The settings model the ``kind`` (``ESTIMATOR`` or ``LOSS``) ``name`` declared, if any."""
    return _PARAMS.get((kind, name))


def declared_params() -> dict[tuple[str, str], type[BaseModel]]:
    """Every declared settings model: (kind, name) -> model (for ``aloft train --help``)."""
    return dict(sorted(_PARAMS.items()))


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``, taking its declared settings from ``config.params``;
    an unknown name raises ValueError listing the known ones."""
    fn = lookup(advantage_estimators, ESTIMATOR, "register_advantage_estimator", name)
    return _bound(fn, params_model(ESTIMATOR, name), config_position=4)


def get_policy_loss(name: str) -> PolicyLoss:
    """The policy loss registered as ``name``, taking its declared settings from ``config.params``;
    an unknown name raises ValueError listing the known ones."""
    fn = lookup(policy_losses, LOSS, "register_policy_loss", name)
    return _bound(fn, params_model(LOSS, name), config_position=4)


def _bound(fn: Any, model: type[BaseModel] | None, config_position: int) -> Any:
    """``fn`` itself, or (it declared settings) ``fn`` called with ``params=`` its settings read from
    the ``config`` argument's ``params`` mapping (the keys its model declares; defaults for the rest)."""
    if model is None:
        return fn

    @functools.wraps(fn)
    def with_params(*args: Any, **kwargs: Any) -> Any:
        config = args[config_position] if len(args) > config_position else kwargs["config"]
        return fn(*args, params=settings_of(model, getattr(config, "params", None)), **kwargs)

    return with_params


def check_algorithm_params(advantage: str, policy_loss: str, params: dict[str, Any]) -> None:
    """Every ``algorithm.params`` key is a setting the selected estimator or loss declared, and its
    value is valid; otherwise a one-line ValueError naming the key and what would be valid."""
    selected = {
        f"{kind} {name}": params_model(kind, name)
        for kind, name in ((ESTIMATOR, advantage), (LOSS, policy_loss))
    }
    check_settings("algorithm.params", selected, params)
