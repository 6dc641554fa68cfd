"""aloft.gym: environments for RL on language models. Torch-free; imports only ``aloft.types`` and
``aloft.plugin_settings`` (pydantic).

from aloft.gym import make
env = make("arithmetic", extras={"answer": "8"})
messages, info = env.reset([{"role": "user", "content": "Add 3 and 5."}])
out = env.step("3 plus 5 is 8. The answer is 8.")   # StepOutput(observations=[], reward=1.0, done=True, ...)
"""

from aloft.gym.checker import EnvCheckError, check_env
from aloft.gym.core import (
    Env,
    StepOutput,
    UnknownEnvError,
    make,
    overlay_of,
    params_of,
    register,
    register_env,
    registered,
)
from aloft.gym.envs import BUILTIN_ENVS
from aloft.types import InfrastructureError

__all__ = [
    "Env",
    "EnvCheckError",
    "InfrastructureError",
    "StepOutput",
    "UnknownEnvError",
    "check_env",
    "make",
    "overlay_of",
    "params_of",
    "register",
    "register_env",
    "registered",
]

for _env_id, _entry_point in BUILTIN_ENVS.items():
    register(_env_id, _entry_point)
# Played by an external program through a capturing endpoint, not step by step (aloft.gym.agent).
register("agent", "aloft.gym.agent:ProgramAgentEnv")

# skyrl-gym's envs run unchanged as `skyrl/<id>` (lazy: skyrl_gym is imported by the first make).
from aloft.gym.adapters.skyrl import SKYRL_BUILTIN_ENV_IDS, register_skyrl_envs  # noqa: E402

register_skyrl_envs(SKYRL_BUILTIN_ENV_IDS)
