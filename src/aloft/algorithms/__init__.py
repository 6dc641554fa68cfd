"""Advantage estimators, policy and value losses, KL, loss reductions and group filters; pure torch.

Estimators and policy losses live in name -> function tables that configs refer to by name
(``algorithm.advantage``, ``algorithm.policy_loss``). Built-ins:

- advantage estimators: ``gae``, ``grpo``, ``dr_grpo``, ``rloo``, ``reinforce++``, ``reinforce++_baseline``
- policy losses: ``ppo``, ``dual_clip``, ``gspo``, ``cispo``

Add your own with ``@register_advantage_estimator(name)`` / ``@register_policy_loss(name)``; see
``aloft.algorithms.registry`` for the signatures. Functions read their settings from a duck-typed
``config`` (in practice ``aloft.config``'s algorithm section); this package imports only torch and
``aloft.types``.
"""

from aloft.algorithms import advantages as _advantages  # noqa: F401  (registers the built-ins)
from aloft.algorithms import policy_losses as _policy_losses  # noqa: F401  (registers the built-ins)
from aloft.algorithms.filters import (
    apply_soft_overlong_penalty,
    drop_failed_trajectories,
    drop_zero_variance_groups,
    overlong_filter_mask,
    soft_overlong_penalty,
)
from aloft.algorithms.kl import KL_ESTIMATORS, apply_kl_penalty_to_rewards, kl_divergence
from aloft.algorithms.logits import (
    entropy_from_logits,
    logprobs_and_entropy_from_logits,
    logprobs_from_logits,
)
from aloft.algorithms.off_policy import OFF_POLICY_CORRECTIONS, off_policy_weights
from aloft.algorithms.reductions import (
    LOSS_REDUCTIONS,
    WHITEN_FORMULAS,
    LossNormalizer,
    aggregate_loss,
    masked_mean,
    masked_whiten,
)
from aloft.algorithms.registry import (
    AdvantageEstimator,
    PolicyLoss,
    advantage_estimators,
    check_algorithm_params,
    declared_params,
    get_advantage_estimator,
    get_policy_loss,
    policy_losses,
    register_advantage_estimator,
    register_policy_loss,
)
from aloft.algorithms.value_loss import clipped_value_loss

__all__ = [
    "OFF_POLICY_CORRECTIONS",
    "off_policy_weights",
    "KL_ESTIMATORS",
    "LOSS_REDUCTIONS",
    "WHITEN_FORMULAS",
    "AdvantageEstimator",
    "LossNormalizer",
    "PolicyLoss",
    "advantage_estimators",
    "aggregate_loss",
    "check_algorithm_params",
    "declared_params",
    "apply_kl_penalty_to_rewards",
    "apply_soft_overlong_penalty",
    "clipped_value_loss",
    "drop_failed_trajectories",
    "drop_zero_variance_groups",
    "entropy_from_logits",
    "get_advantage_estimator",
    "get_policy_loss",
    "kl_divergence",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_logits",
    "masked_mean",
    "masked_whiten",
    "overlong_filter_mask",
    "policy_losses",
    "register_advantage_estimator",
    "register_policy_loss",
    "soft_overlong_penalty",
]
