"""Start and stop ``aloft tinker-serve`` as a real process for the tests of this folder."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from aloft.distributed import free_loopback_port

API_KEY = "tml-aloft-test"
LOGS: dict[int, str] = {}
"""Server pid -> the file its output goes to (removed when it stops)."""


def start_server(model_dir: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``aloft tinker-serve`` on ``model_dir`` as a real process; returns it and its base URL once
    healthy. Its output goes to a file: a pipe nobody reads would block the server once full."""
    port = free_loopback_port()
    log = tempfile.NamedTemporaryFile("w", prefix="tinker-serve-", suffix=".log", delete=False)
    command = [sys.executable, "-m", "aloft.cli", "tinker-serve", model_dir, "--port", str(port)]
    process = subprocess.Popen([*command, *extra], stdout=log, stderr=subprocess.STDOUT, text=True)
    LOGS[process.pid] = log.name
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=1).status_code in (200, 401):
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"tinker-serve did not start: {Path(log.name).read_text()[-3000:]}")
        time.sleep(0.2)


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    process.wait(timeout=30)
    Path(LOGS.pop(process.pid)).unlink(missing_ok=True)
