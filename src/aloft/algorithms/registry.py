"""Name -> implementation tables for advantage estimators and policy losses.

A config names an estimator (``algorithm.advantage``) and a policy loss (``algorithm.policy_loss``);
the trainer looks both up here. Adding an algorithm is one decorated function, no trainer edit::

    from aloft.algorithms import register_policy_loss

    @register_policy_loss("my_loss")
    def my_loss(logprobs, old_logprobs, advantages, loss_mask, config, sampler_logprobs=None, *, normalizer=None):
        ...
        return loss, {"clip_frac": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0}

The module that defines the function must be imported before the config is validated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

from aloft.algorithms.reductions import LossNormalizer
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


def register_advantage_estimator(name: str) -> Callable[[_F], _F]:
    """Decorator: register ``fn`` as the advantage estimator ``name``. A taken name raises ValueError."""
    return register(advantage_estimators, "advantage estimator", "register_advantage_estimator", name)


def register_policy_loss(name: str) -> Callable[[_F], _F]:
    """Decorator: register ``fn`` as the policy loss ``name``. A taken name raises ValueError."""
    return register(policy_losses, "policy loss", "register_policy_loss", name)


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; an unknown name raises ValueError listing the known ones."""
    return lookup(advantage_estimators, "advantage estimator", "register_advantage_estimator", name)


def get_policy_loss(name: str) -> PolicyLoss:
    """The policy loss registered as ``name``; an unknown name raises ValueError listing the known ones."""
    return lookup(policy_losses, "policy loss", "register_policy_loss", name)
