"""Project hygiene checked in every test run: the import layers of DESIGN.md §2 and ruff."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_hold():
    """import-linter contracts in pyproject.toml (gym torch-free, training never imports inference, ...)."""
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is a dev dependency: pip install -e '.[dev]'"
    result = subprocess.run([exe], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_ruff_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]


def test_gym_imports_without_torch():
    code = "import sys, aloft.gym; assert 'torch' not in sys.modules, 'aloft.gym pulled in torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
