"""Adapters that run other libraries' environments as ``aloft.gym`` envs.

- ``skyrl``: skyrl-gym's envs (``register_skyrl_envs()`` makes them ``"skyrl/<id>"``).

Importing this package imports none of those libraries; each is imported when one of its envs is
built.
"""

from aloft.gym.adapters.skyrl import (
    SKYRL_BUILTIN_ENV_IDS,
    SkyRLEnv,
    SkyRLEnvError,
    register_skyrl_envs,
    skyrl_env,
)

__all__ = ["SKYRL_BUILTIN_ENV_IDS", "SkyRLEnv", "SkyRLEnvError", "register_skyrl_envs", "skyrl_env"]
