"""The host side of one run: start the launcher in a new session, feed stdin, read the output and
the status pipe with caps and deadlines, kill the process group at a limit, reap, and say why the
run ended.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .api import (
    SETUP_TIMEOUT_S,
    STATUS_READY,
    SandboxCapabilities,
    SandboxError,
    SandboxLimits,
    SandboxResult,
)
from .config import _check_files, _launcher_config, _launcher_source

_EXITED_NOWAIT = os.WEXITED | os.WNOHANG | os.WNOWAIT


def _run_under(
    code: str,
    stdin: str,
    limits: SandboxLimits,
    files: dict[str, str] | None,
    capabilities: SandboxCapabilities | Callable[[], SandboxCapabilities],
    *,
    audit_hook: bool = True,
) -> SandboxResult:
    """One run under ``capabilities``, or under what ``capabilities()`` returns (called once the
    arguments are checked: ``aloft.gym.sandbox._run`` passes the cached probe). ``audit_hook=False``
    exists for the tests that attack the kernel layers directly; never weaken a real sandbox with it."""
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"run_python: stdin must be a str, got {type(stdin).__name__}")
    caps = capabilities() if callable(capabilities) else capabilities
    if limits.allow_subprocesses and not (caps.pid_namespace or caps.separate_uid):
        raise SandboxError(
            "allow_subprocesses=True needs a pid namespace or a per-run uid to bound the processes; "
            f"this host only has {caps.summary()}"
        )
    if limits.site_packages and not caps.mount_namespace:
        raise SandboxError(f"site_packages=True needs the namespace modes; this host has {caps.summary()}")
    checked_files = _check_files(files)
    run_id = secrets.token_hex(6)
    stage = tempfile.mkdtemp(prefix=f"aloft-sandbox-{run_id}-")
    status_read, status_write = os.pipe()
    process: subprocess.Popen[bytes] | None = None
    try:
        os.chmod(stage, 0o711)  # a per-run uid may traverse it (rlimits mode), not list it
        config = _launcher_config(code, limits, checked_files, caps, stage, run_id, status_write, audit_hook)
        config_path = os.path.join(stage, "config.json")
        with open(os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            json.dump(config, handle)
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _launcher_source(), config_path],
            stdin=subprocess.PIPE,  # a pipe, not a file: the code cannot seek back to re-read it
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_write,),
            start_new_session=True,
            cwd=stage,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        os.close(status_write)
        status_write = -1
        return _supervise(process, status_read, stdin.encode("utf-8"), limits, run_id, caps)
    finally:
        if status_write >= 0:
            os.close(status_write)
        os.close(status_read)
        if process is not None:
            if process.returncode is None:  # only after an exception in _supervise
                _kill_group(process.pid)
                process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        shutil.rmtree(stage, ignore_errors=True)


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


RUN_EXIT_WAIT_S = 2.0
"""How long a run's killed processes get to leave the process table before ``run_python`` returns."""


def _processes_of_run(run_id: str) -> list[int]:
    """Pids whose command line carries the run's marker (``aloft-sandbox:<run_id>``)."""
    marker = f"aloft-sandbox:{run_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:  # gone meanwhile
                continue
    return found


def _wait_until_run_is_gone(run_id: str, timeout_s: float = RUN_EXIT_WAIT_S) -> None:
    """Wait for the run's killed processes to leave: after SIGKILL, and after a pid namespace's init
    dies, the kernel tears the other members down asynchronously, and under load a forked child
    can still be listed for a few milliseconds after the launcher is reaped. Waiting here makes
    "nothing of the run is left when run_python returns" hold rather than race."""
    deadline = time.monotonic() + timeout_s
    while _processes_of_run(run_id) and time.monotonic() < deadline:
        time.sleep(0.005)


def _supervise(
    process: subprocess.Popen[bytes],
    status_fd: int,
    stdin_data: bytes,
    limits: SandboxLimits,
    run_id: str,
    caps: SandboxCapabilities,
) -> SandboxResult:
    """Feed stdin; read stdout/stderr/status with caps and deadlines until the launcher exits; reap it."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    streams = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    status = bytearray()
    selector = selectors.DefaultSelector()
    for fd in (*streams, status_fd):
        selector.register(fd, selectors.EVENT_READ)
    stdin_fd = process.stdin.fileno()
    pending = memoryview(stdin_data)
    if pending:
        os.set_blocking(stdin_fd, False)
        selector.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        process.stdin.close()
    try:
        pidfd: int | None = os.pidfd_open(process.pid)
        selector.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    started = time.monotonic()
    deadline = started + SETUP_TIMEOUT_S
    ready_at: float | None = None
    killed: str | None = None
    truncated = False
    exited_at: float | None = None
    try:
        while True:
            if exited_at is None and os.waitid(os.P_PID, process.pid, _EXITED_NOWAIT) is not None:
                # Not reaped yet, so the group id cannot be reused: kill what the code left behind
                # (a background child of allow_subprocesses; nothing in the namespace modes).
                exited_at = time.monotonic()
                _kill_group(process.pid)
            open_pipes = [fd for fd in (*streams, status_fd) if fd in selector.get_map()]
            if exited_at is not None and not open_pipes:
                break
            now = time.monotonic()
            if now >= deadline:
                if ready_at is None:
                    raise SandboxError(f"the sandbox was not ready after {SETUP_TIMEOUT_S:g} s")
                killed = "wall_time"
                break
            timeout = (
                deadline - now if pidfd is not None and exited_at is None else min(deadline - now, 0.005)
            )
            for key, _ in selector.select(timeout):
                fd = key.fd
                if fd == pidfd:
                    selector.unregister(fd)
                    continue
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:65_536]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the program ended without reading all of it
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(fd)
                        process.stdin.close()
                    continue
                data = os.read(fd, 65_536)
                if not data:
                    selector.unregister(fd)
                    continue
                if fd == status_fd:
                    status += data
                    if ready_at is None and STATUS_READY in status:
                        ready_at = time.monotonic()
                        deadline = ready_at + limits.wall_s
                    continue
                buffer = streams[fd]
                room = limits.max_output_bytes - len(buffer)
                buffer += data[:room]
                if len(data) > room:
                    truncated = True
                    killed = killed or "output_limit"
            if killed:
                break
    finally:
        selector.close()
        if pidfd is not None:
            os.close(pidfd)
    if exited_at is None:
        _kill_group(process.pid)
    _, wait_status, rusage = os.wait4(process.pid, 0)
    exited_at = exited_at or time.monotonic()
    if killed is not None or limits.allow_subprocesses:  # only then can members outlive the launcher
        _wait_until_run_is_gone(run_id)
    process.returncode = os.waitstatus_to_exitcode(wait_status)

    message = status.decode("utf-8", "replace")
    if "error " in message:
        raise SandboxError(f"sandbox setup failed ({caps.mode}): {message.split('error ', 1)[1].strip()}")
    stdout_bytes, stderr_bytes = streams.values()
    stdout = stdout_bytes.decode("utf-8", "replace")
    stderr = stderr_bytes.decode("utf-8", "replace")
    if ready_at is None and killed is None:
        raise SandboxError(
            f"the sandbox exited before it was ready ({caps.mode}, exit code {process.returncode}): "
            f"{_one_line(stderr) or 'no message'}"
        )
    exit_code = process.returncode
    reported = re.search(r"^exit (\d+)$", message, re.MULTILINE)  # from the pid namespace's init
    if reported:
        exit_code = os.waitstatus_to_exitcode(int(reported.group(1)))
    cpu_used = rusage.ru_utime + rusage.ru_stime
    if killed is None:
        if exit_code == -signal.SIGXCPU or (
            exit_code == -signal.SIGKILL and cpu_used >= math.ceil(limits.cpu_s)
        ):
            killed = "cpu_time"
        elif exit_code != 0 and re.search(r"^MemoryError\b", stderr[-2000:], re.MULTILINE):
            killed = "memory"
        elif exit_code < 0:
            killed = "signal"
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        timed_out=killed in ("wall_time", "cpu_time"),
        killed_reason=killed,
        elapsed_s=max(0.0, exited_at - (ready_at or started)),
        truncated=truncated,
        run_id=run_id,
    )
