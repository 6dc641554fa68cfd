"""Shared helpers for the aloft.algorithms tests."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

# The algorithm fields aloft.config defines, with their defaults. aloft.algorithms reads the config by
# attribute only, so a plain namespace stands in for the pydantic model here.
ALGORITHM_DEFAULTS = {
    "advantage": "grpo",
    "norm_adv_by_std": True,
    "group_of_one": "zero",
    "whiten_formula": "std_eps",
    "whiten_gae": False,
    "gamma": 1.0,
    "lam": 1.0,
    "policy_loss": "ppo",
    "clip_low": 0.2,
    "clip_high": 0.2,
    "dual_clip_c": 3.0,
    "gspo_clip_low": 3e-4,
    "gspo_clip_high": 4e-4,
    "cispo_clip_high": 0.28,
    "cispo_clip_low": None,
    "loss_reduction": "token_mean",
    "seq_mean_counts_masked_rows": False,
    "kl_coef": 0.0,
    "kl_estimator": "k3",
    "kl_clamp": None,
    "kl_penalty": "loss",
    "entropy_coef": 0.0,
    "value_clip": 0.2,
    "overlong_buffer_len": 0,
    "overlong_penalty_factor": 1.0,
}


def algorithm_config(**overrides: object) -> SimpleNamespace:
    unknown = set(overrides) - set(ALGORITHM_DEFAULTS)
    assert not unknown, f"not an algorithm field: {unknown}"
    return SimpleNamespace(**{**ALGORITHM_DEFAULTS, **overrides})


@pytest.fixture(scope="session")
def make_config() -> Callable[..., SimpleNamespace]:
    """``make_config(**overrides)``: an algorithm config with the defaults (session scope: hypothesis-safe)."""
    return algorithm_config
