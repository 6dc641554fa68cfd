"""The gym is torch-free and registers its built-in envs without importing them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aloft

SRC = str(Path(aloft.__file__).resolve().parents[1])


def test_import_aloft_gym_does_not_import_torch_or_the_env_modules():
    code = (
        "import sys, aloft.gym; "
        "print('torch' in sys.modules, 'transformers' in sys.modules, "
        "[m for m in sys.modules if m.startswith('aloft.gym.envs.') or m.startswith('aloft.gym.tools')], "
        "'math_verify' in sys.modules or 'skyrl_gym' in sys.modules, "
        "aloft.gym.registered() == sorted([*aloft.gym.envs.BUILTIN_ENVS, 'agent', "
        "*('skyrl/' + i for i in aloft.gym.adapters.skyrl.SKYRL_BUILTIN_ENV_IDS)]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False [] False True"
