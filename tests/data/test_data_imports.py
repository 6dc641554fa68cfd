"""aloft.data stays independent: no torch, and no gym (rows name their env by id only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aloft

SRC = str(Path(aloft.__file__).resolve().parents[1])


def test_import_aloft_data_imports_neither_torch_nor_the_gym():
    code = "import sys, aloft.data; print('torch' in sys.modules, 'aloft.gym' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False"
