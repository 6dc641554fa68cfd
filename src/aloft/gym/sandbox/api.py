"""The sandbox's public data types and constants: limits, results, capabilities, errors.

The lowest layer of ``aloft.gym.sandbox`` (standard library only); the package docstring says what
each mode and limit guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("namespaces", "user_namespaces", "rlimits")
"""The isolation layers, strongest first (see the package docstring)."""
WORKDIR = "/sandbox"
"""The working directory inside the namespace modes (a tmpfs)."""
SETUP_TIMEOUT_S = 30.0
"""Longest the host waits for the sandbox to be ready before it gives up (SandboxError)."""
STATUS_READY = b"ready"


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not a failure of the code it runs)."""


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Resource limits of one run, and two policy switches (both off by default)."""

    cpu_s: float = 5.0
    """CPU seconds (``RLIMIT_CPU``, rounded up to whole seconds): SIGXCPU, then SIGKILL one second later."""
    wall_s: float = 10.0
    """Wall-clock seconds of the code (from "ready"; setup time not counted): then SIGKILL to the group."""
    memory_mb: int = 512
    """Address-space limit (``RLIMIT_AS``) in MiB; allocations beyond it raise MemoryError."""
    max_processes: int = 16
    """Tasks (processes *and* threads) of the sandbox's uid (``RLIMIT_NPROC``)."""
    max_output_bytes: int = 65_536
    """Bytes kept per stream (stdout, stderr); more output kills the run (``truncated``)."""
    max_file_mb: int = 16
    """Largest file the code may write (``RLIMIT_FSIZE``), MiB."""
    disk_mb: int = 64
    """Size of the ``/sandbox`` tmpfs (namespace modes), MiB."""
    max_open_files: int = 64
    """File descriptors (``RLIMIT_NOFILE``)."""
    allow_subprocesses: bool = False
    """Let the code fork and exec (up to ``max_processes``). Needs a pid namespace or a per-run uid."""
    site_packages: bool = False
    """Make the interpreter's site-packages importable (read-only); namespace modes only."""

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 86_400:
                raise ValueError(
                    f"SandboxLimits.{name} must be a number of seconds in (0, 86400), got {value!r}"
                )
        minimums = {"memory_mb": 64, "max_processes": 1, "max_output_bytes": 1, "max_file_mb": 1}
        minimums |= {"disk_mb": 1, "max_open_files": 16}
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"SandboxLimits.{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class SandboxResult:
    """What one run did."""

    stdout: str
    """Standard output (UTF-8, invalid bytes replaced), at most ``max_output_bytes`` bytes of it."""
    stderr: str
    """Standard error, same cap (a traceback lands here; its frames name the code ``main.py``)."""
    exit_code: int
    """The exit status; negative: killed by that signal (e.g. -9 for SIGKILL)."""
    timed_out: bool
    """Stopped by the wall-time or the CPU-time limit."""
    killed_reason: str | None
    """None, or why the run ended abnormally: ``"wall_time"``, ``"cpu_time"``, ``"memory"`` (MemoryError),
    ``"output_limit"`` or ``"signal"`` (another signal, e.g. SIGSEGV)."""
    elapsed_s: float
    """Wall time of the code itself, from "ready" to exit (sandbox setup excluded)."""
    truncated: bool
    """Output went beyond ``max_output_bytes`` and was cut (the run was killed then)."""
    run_id: str
    """Unique id of the run; the sandboxed processes carry ``aloft-sandbox:<run_id>`` in their command line."""

    @property
    def ok(self) -> bool:
        """Exited with status 0 and no limit hit."""
        return self.exit_code == 0 and self.killed_reason is None


@dataclass(frozen=True)
class SandboxCapabilities:
    """The isolation layers ``run_python`` uses on this host (see the package docstring's table)."""

    mode: str
    """``"namespaces"``, ``"user_namespaces"`` or ``"rlimits"``."""
    network_namespace: bool
    mount_namespace: bool
    """A private root file system (read-only binds + tmpfs) entered with pivot_root."""
    pid_namespace: bool
    separate_uid: bool
    """The code runs under a random per-run uid (not the host's user)."""
    seccomp: bool
    audit_hook: bool = True
    rlimits: bool = True
    notes: tuple[str, ...] = ()
    """Why stronger layers were not used (one line each)."""

    def summary(self) -> str:
        layers = [
            name
            for name, active in (
                ("netns", self.network_namespace),
                ("mountns+ro-root", self.mount_namespace),
                ("pidns", self.pid_namespace),
                ("per-run-uid", self.separate_uid),
                ("seccomp", self.seccomp),
                ("audit-hook", self.audit_hook),
                ("rlimits", self.rlimits),
            )
            if active
        ]
        return f"{self.mode}: {', '.join(layers)}"
