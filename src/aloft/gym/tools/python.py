"""``PythonTools``: the ``run_python`` tool, backed by the sandbox of ``aloft.gym.sandbox``. Torch-free.

    tools = PythonTools(SandboxLimits(wall_s=5))
    tools.call("run_python", {"code": "print(2 ** 10)"}).output     # "1024\\n"
    tools.call("run_python", {"code": "while True: pass"}).output
    # "[stopped: the CPU time limit of 5 s was reached]"

Every call is a fresh sandboxed process (no state is kept between calls: define what you need in
each program). The observation is the program's stdout, then its stderr (a traceback ends up there),
then one bracketed status line when something went wrong (timeout, memory, exit code, truncated
output); long streams keep their head and tail. It never contains timings, so the same program
always gives the same observation. See ``format_result`` for the exact layout.
"""

from __future__ import annotations

import threading
from typing import Literal

from aloft.gym import sandbox
from aloft.gym.sandbox import SandboxLimits, SandboxResult
from aloft.gym.tools.base import ToolGroup, tool
from aloft.types import InfrastructureError

__all__ = ["PythonTools", "clip_middle", "format_result", "status_line"]

SETUP_MARGIN_S = 30.0
"""Added to the sandbox's wall-time limit for the group's own safety-net timeout (sandbox setup)."""


def clip_middle(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[len(text) - tail :]}"


def status_line(result: SandboxResult, limits: SandboxLimits) -> str | None:
    """One bracketed line saying how the run ended abnormally, or None when it exited with 0."""
    reason = result.killed_reason
    if reason == "wall_time":
        return f"[stopped: the time limit of {limits.wall_s:g} s was reached]"
    if reason == "cpu_time":
        return f"[stopped: the CPU time limit of {limits.cpu_s:g} s was reached]"
    if reason == "memory":
        return f"[stopped: out of memory (limit {limits.memory_mb} MB)]"
    if reason == "output_limit":
        return f"[stopped: the output went beyond {limits.max_output_bytes} bytes and was cut]"
    if reason == "signal":
        return f"[stopped: killed by signal {-result.exit_code}]"
    if result.exit_code != 0:
        return f"[exit code {result.exit_code}]"
    return None


def format_result(result: SandboxResult, limits: SandboxLimits, max_chars: int = 2000) -> str:
    """The observation for one run: stdout, ``stderr:`` + stderr, the status line; or ``[no output]``.

    Each stream is clipped to ``max_chars`` characters (head and tail kept).
    """
    parts = []
    if result.stdout:
        parts.append(clip_middle(result.stdout.rstrip("\n"), max_chars))
    if result.stderr.strip():
        parts.append("stderr:\n" + clip_middle(result.stderr.rstrip("\n"), max_chars))
    status = status_line(result, limits)
    if status:
        parts.append(status)
    return "\n".join(parts) if parts else "[no output]"


class PythonTools(ToolGroup):
    """One tool, ``run_python(code)``, that runs a program in the sandbox and returns what it printed.

    ``limits`` apply to every call. Metrics (on top of the group's ``tool_*`` counters):
    ``python_runs``, ``python_failures`` (non-zero exit or a limit hit) and ``python_timeouts``
    (wall or CPU limit).
    """

    name = "python"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        max_chars: int = 2000,
        timeout_s: float | None | Literal["default"] = "default",
    ) -> None:
        self.limits = limits or SandboxLimits()
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 100:
            raise ValueError(f"PythonTools: max_chars must be an integer >= 100, got {max_chars!r}")
        self.max_chars = max_chars
        # The sandbox enforces its own limits; the group's timeout is only a safety net above them.
        super().__init__(
            timeout_s=self.limits.wall_s + SETUP_MARGIN_S if timeout_s == "default" else timeout_s
        )
        self._counts_lock = threading.Lock()
        self._runs = self._failures = self._timeouts = 0

    @tool
    def run_python(self, code: str) -> str:
        """Run a Python 3 program in a sandbox and return its output (stdout, then stderr).

        Each call starts a fresh process: no variables survive between calls, there is no network,
        and only the working directory is writable. Print what you want to see.

        Args:
            code: The complete program to run.
        """
        try:
            result = sandbox.run_python(code, limits=self.limits)
        except sandbox.SandboxError as error:  # the sandbox could not start: not the model's doing
            raise InfrastructureError(f"sandbox: {error}") from error
        with self._counts_lock:
            self._runs += 1
            self._failures += not result.ok
            self._timeouts += result.timed_out
        return format_result(result, self.limits, self.max_chars)

    def metrics(self) -> dict[str, float]:
        with self._counts_lock:
            counts = {
                "python_runs": float(self._runs),
                "python_failures": float(self._failures),
                "python_timeouts": float(self._timeouts),
            }
        return {**super().metrics(), **counts}

    def reset_stats(self) -> None:
        super().reset_stats()
        with self._counts_lock:
            self._runs = self._failures = self._timeouts = 0
