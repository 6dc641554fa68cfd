"""``PythonTools``: the sandboxed ``run_python`` tool as an env sees it (real sandbox runs)."""

from __future__ import annotations

import pytest

from aloft.gym.sandbox import SandboxLimits
from aloft.gym.tools.python import PythonTools, clip_middle

LIMITS = SandboxLimits(cpu_s=1, wall_s=2, memory_mb=256, max_output_bytes=5000)


@pytest.fixture
def tools():
    with PythonTools(LIMITS, max_chars=200) as group:
        yield group


def output(tools: PythonTools, code: str) -> str:
    result = tools.call("run_python", {"code": code})
    assert result.ok and result.error is None  # the tool itself worked, whatever the program did
    return result.output


def test_the_tool_schema_is_the_openai_format(tools):
    (schema,) = tools.schemas()
    assert schema["function"]["name"] == "run_python"
    assert schema["function"]["parameters"]["required"] == ["code"]


def test_observations_are_readable_and_deterministic(tools):
    assert output(tools, "print(2 ** 10)") == "1024"
    assert output(tools, "pass") == "[no output]"
    assert output(tools, "import sys; print('partial'); sys.exit(4)") == "partial\n[exit code 4]"
    crash = output(tools, "print('before')\n1 / 0")
    assert crash.startswith('before\nstderr:\nTraceback (most recent call last):\n  File "main.py", line 2')
    assert crash.endswith("ZeroDivisionError: division by zero\n[exit code 1]")
    assert output(tools, "print('before')\n1 / 0") == crash


def test_limits_become_status_lines(tools):
    assert output(tools, "while True: pass") == "[stopped: the CPU time limit of 1 s was reached]"
    assert output(tools, "import time; time.sleep(30)") == "[stopped: the time limit of 2 s was reached]"
    assert output(tools, "x = bytearray(4 * 1024**3)").endswith("[stopped: out of memory (limit 256 MB)]")
    flood = output(tools, "while True: print('y' * 100)")
    assert flood.endswith("[stopped: the output went beyond 5000 bytes and was cut]")
    assert "characters omitted" in flood and len(flood) < 400


def test_escape_attempts_come_back_as_errors_the_model_can_read(tools):
    assert "sandbox: network access is disabled" in output(
        tools, "import socket; socket.create_connection(('127.0.0.1', 22))"
    )
    assert "sandbox: starting processes is disabled" in output(tools, "import os; os.system('ls')")


def test_metrics_count_runs_failures_and_timeouts(tools):
    output(tools, "print(1)")
    output(tools, "1/0")
    output(tools, "while True: pass")
    tools.call("run_python", {})  # bad arguments: no run
    metrics = tools.metrics()
    assert (metrics["python_runs"], metrics["python_failures"], metrics["python_timeouts"]) == (3.0, 2.0, 1.0)
    assert (metrics["tool_calls"], metrics["tool_errors"]) == (4.0, 1.0)
    tools.reset_stats()
    assert tools.metrics()["python_runs"] == 0.0 and tools.metrics()["tool_calls"] == 0.0


def test_clip_middle_keeps_head_and_tail():
    assert clip_middle("abc", 10) == "abc"
    assert clip_middle("a" * 50 + "b" * 50, 20) == "a" * 10 + "\n... [80 characters omitted] ...\n" + "b" * 10


def test_a_sandbox_that_cannot_start_fails_the_call_instead_of_reaching_the_model(monkeypatch):
    """The real probe, with a mode that does not exist: the tool raises an InfrastructureError (the
    trajectory fails, never a reward) rather than showing the model a sandbox error."""
    from aloft.gym import sandbox
    from aloft.types import InfrastructureError

    monkeypatch.setattr(sandbox, "_CAPABILITIES", None)  # probe again; restored afterwards
    monkeypatch.setenv("ALOFT_SANDBOX_MODE", "no-such-mode")
    with (
        PythonTools() as tools,
        pytest.raises(InfrastructureError, match="^sandbox: ALOFT_SANDBOX_MODE must be"),
    ):
        tools.call("run_python", {"code": "print(1)"})
