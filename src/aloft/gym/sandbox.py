"""Run model-written Python in a sandboxed subprocess. Torch-free; standard library only.

    result = run_python("print(sum(range(10)))", limits=SandboxLimits(wall_s=5))
    result.stdout            # "45\\n"
    sandbox_capabilities()   # which isolation layers this host gives (probed once, cached)

How a run works: the host writes a config into a fresh temporary directory and starts a *launcher*
(``python -I -S -c``, source shipped inline) in a new session. The launcher builds the sandbox and
execs a fresh interpreter whose *bootstrap* installs a seccomp filter and an audit hook,
reports "ready" on a status pipe, and only then runs the model's code (compiled as ``main.py`` in a
fresh ``__main__`` module; stdlib ``exit()``/``quit()`` work; ``PYTHONHASHSEED=0`` so printed sets
are reproducible; stdin is a pipe the host feeds, so it cannot be re-read by seeking). In the namespace modes the launcher forks twice: a supervisor stays outside,
pid 1 of the new pid namespace reaps and reports the code's exit status, and the code runs as pid 2.
The host reads stdout/stderr with caps, kills the whole process group at the wall-time limit, reaps,
and removes the temporary directory.

Modes, strongest first (``sandbox_capabilities().mode``; the probe runs ``print('ok')`` under each
candidate and keeps the first that works; ``ALOFT_SANDBOX_MODE`` restricts it to one mode):

1. ``"namespaces"`` (the host process is root with CAP_SYS_ADMIN, e.g. a container run as root):
   new mount, network, pid, IPC and UTS namespaces; a tmpfs root holding only read-only bind mounts
   of ``/usr`` (and the ``/bin``, ``/lib*`` links), the Python install, ``/etc/ld.so.cache``,
   ``/etc/localtime``, ``/etc/mime.types``, the devices null/zero/full/random/urandom, and a
   size-limited tmpfs ``/sandbox`` (also ``/tmp``, ``$HOME``, ``$TMPDIR``); ``pivot_root`` into it
   and the host root detached; then a drop to a random per-run uid/gid (no capabilities,
   ``no_new_privs``). **This is the mode probed on the project's dev machine (root in a VM
   container, kernel 6.18), with seccomp: every layer in the table's middle column is active.**
2. ``"user_namespaces"`` (not root, unprivileged user namespaces allowed): the same namespaces and
   private read-only root, built in a new user namespace that maps only the caller's uid; the
   capabilities it grants vanish at the exec (the uid is not 0 there). No per-run uid. The tests run
   this mode for real as uid 65534.
3. ``"rlimits"`` (no namespaces): a temporary host directory as working directory; a per-run uid
   only when the host is root *and* that uid can execute the interpreter (not so for a Python
   installed under ``/root``, which is 0700); seccomp; the audit hook. Weak: see the table.

What each guarantee rests on. K = kernel-enforced, a security boundary. H = the Python audit hook
(``sys.addaudithook``), *not* a boundary: ctypes (allowed in the namespace modes, where numpy needs
it), memory corruption or a CPython bug gets past it; it turns the usual attempts into a clear
``PermissionError`` the model can read.

=========================  ================================================  ===========================================
guarantee                  namespaces / user_namespaces                      rlimits (no namespaces)
=========================  ================================================  ===========================================
no network                 K: own network namespace (only a down ``lo``);    K: seccomp refuses ``socket()``; H
                           K: seccomp refuses ``socket()``; H
host files unreadable      K: they are not in the private root               per-run uid: K file permissions (world-
                                                                             readable files stay readable); else H only
host files not writable    K: read-only bind mounts, no capabilities, the    per-run uid: K permissions (world-writable
                           rest is tmpfs gone after the run                  dirs such as /tmp stay writable); else H only
no child processes         K: seccomp refuses fork/vfork/execve and clone    same (K seccomp; H)
(``allow_subprocesses``    except for threads; H
False, the default)
process count              K: ``RLIMIT_NPROC`` on the per-run uid (tasks,    K: ``RLIMIT_NPROC`` = the uid's current task
                           threads included); everything in the pid ns dies  count + ``max_processes`` (per-user; ignored
                           with its init                                     for root). ``allow_subprocesses`` needs a
                                                                             per-run uid here (else SandboxError)
CPU time                   K: ``RLIMIT_CPU`` (SIGXCPU, SIGKILL 1 s later)    same
wall time                  K: SIGKILL to the process group (setsid/setpgid   same
                           are refused, so the code cannot leave it) and
                           pid-ns teardown; PR_SET_PDEATHSIG if the host
                           process dies
memory                     K: ``RLIMIT_AS`` (MemoryError); tmpfs sizes;      K: ``RLIMIT_AS``; ``RLIMIT_FSIZE`` per file
                           ``RLIMIT_FSIZE`` per file
output size                K: the host keeps ``max_output_bytes`` per        same
                           stream, then kills the group
fresh working directory    K: a new tmpfs per run                            a new host temp dir, removed after the run
scrubbed environment       a new env (PATH, HOME, TMPDIR, LANG, PYTHON*,     same
                           thread-pool sizes); nothing inherited
signals to host processes  K: pid namespace (and another uid)                K: seccomp allows kill/tgkill only to itself
                                                                             (per-run uid: K permissions)
=========================  ================================================  ===========================================

Also always (x86-64 and aarch64; elsewhere the seccomp layer is off and reported so): seccomp
refuses ptrace, process_vm_*, mount/umount/pivot_root/chroot, unshare/setns, bpf, perf_event_open,
userfaultfd, io_uring, keyctl, kexec/modules, personality, pidfd_*, x32 syscalls, and kills on a
foreign-architecture syscall (32-bit ``int 0x80``). The hook also refuses, in every mode, sockets,
process creation, writes outside the working directory; in rlimits mode also ctypes and reads
outside the Python install, ``/usr`` and the working directory.

Not guaranteed anywhere: protection against kernel exploits (seccomp only narrows the surface),
disk *bandwidth* or CPU *share* (no cgroups: a run may use a full core until its CPU limit), and,
in rlimits mode without a per-run uid, anything but the audit hook for files. Only the standard
library is importable unless ``site_packages=True`` (the interpreter's site-packages bound
read-only; namespace modes only).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import platform
import re
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SandboxCapabilities",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "run_python",
    "sandbox_capabilities",
]

MODES = ("namespaces", "user_namespaces", "rlimits")
"""The isolation layers, strongest first (see the module docstring)."""
WORKDIR = "/sandbox"
"""The working directory inside the namespace modes (a tmpfs)."""
SETUP_TIMEOUT_S = 30.0
"""Longest the host waits for the sandbox to be ready before it gives up (SandboxError)."""
STATUS_READY = b"ready"
_EXITED_NOWAIT = os.WEXITED | os.WNOHANG | os.WNOWAIT


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
    """The isolation layers ``run_python`` uses on this host (see the module docstring's table)."""

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


# ---------------------------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------------------------


def run_python(
    code: str,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in the strongest sandbox this host allows.

    ``stdin`` is the program's standard input; ``files`` maps relative paths to text written into
    the working directory first (e.g. a helper module the code imports). Thread-safe: every call
    gets its own processes and directory. Raises ``SandboxError`` only when the sandbox itself
    cannot be built; anything the code does (errors, timeouts, escape attempts) is in the result.
    """
    return _run(code, stdin, limits or SandboxLimits(), files)


_CAPABILITIES: SandboxCapabilities | None = None
_CAPABILITIES_LOCK = threading.Lock()


def sandbox_capabilities(refresh: bool = False) -> SandboxCapabilities:
    """Probe (once per process, cached) which isolation layers work here, strongest first.

    ``ALOFT_SANDBOX_MODE`` (one of ``MODES``) restricts the probe to that mode. Raises
    ``SandboxError`` if no mode can run even ``print('ok')``.
    """
    global _CAPABILITIES
    with _CAPABILITIES_LOCK:
        if _CAPABILITIES is None or refresh:
            _CAPABILITIES = _probe()
        return _CAPABILITIES


def _capabilities_of(mode: str, separate_uid: bool, seccomp: bool, notes: list[str]) -> SandboxCapabilities:
    namespaced = mode != "rlimits"
    return SandboxCapabilities(
        mode=mode,
        network_namespace=namespaced,
        mount_namespace=namespaced,
        pid_namespace=namespaced,
        separate_uid=separate_uid,
        seccomp=seccomp,
        notes=tuple(notes),
    )


def _candidates() -> list[tuple[str, bool]]:
    """(mode, separate_uid) pairs to try, strongest first."""
    root = os.geteuid() == 0
    candidates = [("namespaces", True)] if root else [("user_namespaces", False)]
    candidates += [("rlimits", True)] if root else []
    candidates += [("rlimits", False)]
    forced = os.environ.get("ALOFT_SANDBOX_MODE")
    if forced:
        if forced not in MODES:
            raise SandboxError(f"ALOFT_SANDBOX_MODE must be one of {list(MODES)}, got {forced!r}")
        if forced == "user_namespaces" and root:
            raise SandboxError(
                "ALOFT_SANDBOX_MODE=user_namespaces is for non-root hosts; root uses 'namespaces'"
            )
        candidates = [candidate for candidate in candidates if candidate[0] == forced]
    return candidates


def _probe() -> SandboxCapabilities:
    notes: list[str] = []
    seccomp_options = [True, False] if _seccomp_arch() else [False]
    if not _seccomp_arch():
        notes.append(f"seccomp: no syscall table for CPU {platform.machine()!r}")
    for mode, separate_uid in _candidates():
        for seccomp in seccomp_options:
            capabilities = _capabilities_of(mode, separate_uid, seccomp, notes)
            try:
                result = _run("print('ok')", "", SandboxLimits(wall_s=20, cpu_s=10), None, capabilities)
            except (SandboxError, OSError) as error:
                notes.append(f"{mode}{'' if seccomp else ' without seccomp'}: {_one_line(str(error))}")
                continue
            if result.stdout == "ok\n" and result.ok:
                return _capabilities_of(mode, separate_uid, seccomp, notes)
            detail = _one_line(result.stderr) or f"exit code {result.exit_code}"
            notes.append(f"{mode}{'' if seccomp else ' without seccomp'}: probe failed ({detail})")
    raise SandboxError("no sandbox mode works on this host: " + "; ".join(notes))


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]


# ---------------------------------------------------------------------------------------------
# the host side of one run
# ---------------------------------------------------------------------------------------------


def _run(
    code: str,
    stdin: str,
    limits: SandboxLimits,
    files: dict[str, str] | None,
    capabilities: SandboxCapabilities | None = None,
    *,
    audit_hook: bool = True,
) -> SandboxResult:
    """One run under ``capabilities`` (default: the probed ones). ``audit_hook=False`` exists for
    the tests that attack the kernel layers directly; never weaken a real sandbox with it."""
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"run_python: stdin must be a str, got {type(stdin).__name__}")
    caps = capabilities or sandbox_capabilities()
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


def _check_files(files: dict[str, str] | None) -> dict[str, str]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise TypeError(
            f"run_python: files must be a dict of relative path -> text, got {type(files).__name__}"
        )
    for path, content in files.items():
        parts = path.split("/") if isinstance(path, str) else []
        if not parts or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(
                f"run_python: file name {path!r} must be a relative path without '..' or empty parts"
            )
        if not isinstance(content, str):
            raise TypeError(
                f"run_python: content of file {path!r} must be a str, got {type(content).__name__}"
            )
    return dict(files)


def _launcher_config(
    code: str,
    limits: SandboxLimits,
    files: dict[str, str],
    caps: SandboxCapabilities,
    stage: str,
    run_id: str,
    status_fd: int,
    audit_hook: bool,
) -> dict[str, Any]:
    namespaced = caps.mode != "rlimits"
    uid = secrets.randbelow(1 << 29) + (1 << 20) if caps.separate_uid else None
    workdir = WORKDIR if namespaced else os.path.join(stage, "work")
    python = sys.executable
    program, pid_slots = (
        _seccomp_program(limits.allow_subprocesses, signals_to_self_only=not namespaced and uid is None)
        if caps.seccomp
        else (b"", [])
    )
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set/dict-of-str orders (and so printed output) are reproducible
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        # Native thread pools (numpy's BLAS, OpenMP) would count against max_processes and memory.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    python_flags = ["-s", "-P", "-B", "-u"] + ([] if limits.site_packages else ["-S"])
    bootstrap = {
        "status_fd": status_fd,
        "workdir": workdir,
        "code_path": "/.aloft/main.py" if namespaced else os.path.join(stage, "main.py"),
        "seccomp": program.hex(),
        "seccomp_pid_slots": pid_slots,
        "audit_hook": audit_hook,
        "allow_subprocesses": limits.allow_subprocesses,
        # ctypes reaches any syscall: refused where the hook is a real layer (rlimits mode); in the
        # namespace modes the kernel layers hold anyway, and numpy & co. need ctypes.
        "block_ctypes": not namespaced,
        # Namespace modes: the private root already hides the host, so reads are not filtered.
        "read_roots": ["/"] if namespaced else _read_roots(workdir),
    }
    binds, symlinks = _root_layout(limits.site_packages) if namespaced else ([], [])
    return {
        "mode": caps.mode,
        "status_fd": status_fd,
        "stage": stage,
        "root": os.path.join(stage, "root"),
        "workdir": workdir,
        "uid": uid,
        "python": python,
        "argv": [
            python,
            *python_flags,
            "-c",
            _bootstrap_source(),
            f"aloft-sandbox:{run_id}",
            json.dumps(bootstrap),
        ],
        "env": env,
        "code": code,
        "files": files,
        "binds": binds,
        "symlinks": symlinks,
        "cpu_s": math.ceil(limits.cpu_s),
        "memory_bytes": limits.memory_mb << 20,
        "max_processes": limits.max_processes,
        "file_bytes": limits.max_file_mb << 20,
        "disk_bytes": limits.disk_mb << 20,
        "max_open_files": limits.max_open_files,
    }


def _python_dirs(site_packages: bool) -> list[str]:
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    if site_packages:
        import site

        paths.update(path for path in site.getsitepackages() if os.path.isdir(path))
    return sorted(os.path.realpath(path) for path in paths)


def _root_layout(site_packages: bool) -> tuple[list[str], list[list[str]]]:
    """Read-only binds and symlinks of the private root: /usr, the /bin and /lib* links, Python, /etc bits."""
    binds: list[str] = []
    symlinks: list[list[str]] = []
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(path):
            symlinks.append([path, os.readlink(path)])
        elif os.path.isdir(path):
            binds.append(path)
    for path in _python_dirs(site_packages):
        if not any(path == bound or path.startswith(bound + "/") for bound in binds):
            binds.append(path)
    binds += [
        path for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/mime.types") if os.path.exists(path)
    ]
    return binds, symlinks


def _read_roots(workdir: str) -> list[str]:
    roots = [
        workdir,
        "/usr",
        "/bin",
        "/lib",
        "/lib64",
        "/etc/localtime",
        "/etc/ld.so.cache",
        "/etc/mime.types",
    ]
    roots += ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", *_python_dirs(site_packages=False)]
    return sorted({os.path.realpath(root) for root in roots})


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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


# ---------------------------------------------------------------------------------------------
# seccomp: a small BPF program, assembled here, installed by the bootstrap
# ---------------------------------------------------------------------------------------------

_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_PID_PLACEHOLDER = 0xFFFFFFFF

# Syscall numbers (from <asm/unistd_64.h> and <asm-generic/unistd.h>) of the two CPUs supported.
_SYSCALL_NUMBERS: dict[str, str] = {
    "x86_64": """
        socket=41 setsid=112 setpgid=109 ptrace=101 process_vm_readv=310 process_vm_writev=311 mount=165
        umount2=166 pivot_root=155 chroot=161 unshare=272 setns=308 open_tree=428 move_mount=429 fsopen=430
        fsconfig=431 fsmount=432 fspick=433 mount_setattr=442 bpf=321 perf_event_open=298 userfaultfd=323
        keyctl=250 add_key=248 request_key=249 io_uring_setup=425 io_uring_enter=426 io_uring_register=427
        kexec_load=246 kexec_file_load=320 init_module=175 finit_module=313 delete_module=176 reboot=169
        swapon=167 swapoff=168 personality=135 name_to_handle_at=303 open_by_handle_at=304 acct=163
        syslog=103 uselib=134 quotactl=179 lookup_dcookie=212 vhangup=153 iopl=172 ioperm=173
        pidfd_open=434 pidfd_send_signal=424 pidfd_getfd=438 tkill=200 fork=57 vfork=58 execve=59
        execveat=322 clone=56 clone3=435 kill=62 tgkill=234 rt_sigqueueinfo=129 rt_tgsigqueueinfo=297
    """,
    "aarch64": """
        socket=198 setsid=157 setpgid=154 ptrace=117 process_vm_readv=270 process_vm_writev=271 mount=40
        umount2=39 pivot_root=41 chroot=51 unshare=97 setns=268 open_tree=428 move_mount=429 fsopen=430
        fsconfig=431 fsmount=432 fspick=433 mount_setattr=442 bpf=280 perf_event_open=241 userfaultfd=282
        keyctl=219 add_key=217 request_key=218 io_uring_setup=425 io_uring_enter=426 io_uring_register=427
        kexec_load=104 kexec_file_load=294 init_module=105 finit_module=273 delete_module=106 reboot=142
        swapon=224 swapoff=225 personality=92 name_to_handle_at=264 open_by_handle_at=265 acct=89
        syslog=116 quotactl=60 lookup_dcookie=18 vhangup=58 pidfd_open=434 pidfd_send_signal=424
        pidfd_getfd=438 tkill=130 execve=221 execveat=281 clone=220 clone3=435 kill=129 tgkill=131
        rt_sigqueueinfo=138 rt_tgsigqueueinfo=240
    """,
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = {"x86_64": 0x40000000}
_DENIED_SYSCALLS = (
    "socket setsid setpgid ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot "
    "unshare setns open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr bpf perf_event_open "
    "userfaultfd keyctl add_key request_key io_uring_setup io_uring_enter io_uring_register kexec_load "
    "kexec_file_load init_module finit_module delete_module reboot swapon swapoff personality "
    "name_to_handle_at open_by_handle_at acct syslog uselib quotactl lookup_dcookie vhangup iopl ioperm "
    "pidfd_open pidfd_send_signal pidfd_getfd tkill"
).split()
"""Refused with EPERM under every policy (the ones a CPU lacks are skipped)."""
_PROCESS_SYSCALLS = ("fork", "vfork", "execve", "execveat")
"""Refused unless ``allow_subprocesses`` (clone is refused too, except for threads)."""
_SIGNAL_SYSCALLS = ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
"""Allowed only with the sandbox's own pid as first argument, where signals must stay inside."""


def _seccomp_arch() -> str | None:
    """``"x86_64"`` or ``"aarch64"`` when this CPU has a syscall table here, else None."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in _SYSCALL_NUMBERS else None


def _seccomp_program(allow_subprocesses: bool, signals_to_self_only: bool) -> tuple[bytes, list[int]]:
    """The filter as bytes (8 per instruction) and the indices whose constant is the sandbox's pid.

    Without ``allow_subprocesses``: fork/vfork/execve refused, clone allowed only for threads.
    ``signals_to_self_only``: kill/tgkill/rt_sigqueueinfo allowed only at its own pid (or kill(0)),
    for the rlimits mode where the code shares a uid (and a pid namespace) with the host.
    clone3 gets ENOSYS (its flags are in memory, out of BPF's reach; libc falls back to clone).
    """
    arch = _seccomp_arch()
    if arch is None:
        raise SandboxError(f"no seccomp syscall table for CPU {platform.machine()!r}")
    numbers = {
        name: int(value) for name, value in (item.split("=") for item in _SYSCALL_NUMBERS[arch].split())
    }
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    arg0 = 16  # offsetof(struct seccomp_data, args[0]); the low 32 bits on little-endian CPUs
    code: list[tuple[Any, ...]] = [(load, 4), (jeq, _AUDIT_ARCH[arch], None, "kill"), (load, 0)]
    if arch in _X32_SYSCALL_BIT:  # x32 ABI syscalls: another numbering, refuse them all
        code.append((jge, _X32_SYSCALL_BIT[arch], "eperm", None))
    refused = _DENIED_SYSCALLS + ([] if allow_subprocesses else list(_PROCESS_SYSCALLS))
    code += [(jeq, numbers[name], "eperm", None) for name in refused if name in numbers]
    code.append((jeq, numbers["clone3"], "enosys", None))
    if not allow_subprocesses:
        code.append((jeq, numbers["clone"], "clone", None))
    if signals_to_self_only:
        code.append((jeq, numbers["kill"], "kill_check", None))
        code += [(jeq, numbers[name], "pid_check", None) for name in _SIGNAL_SYSCALLS]
    code.append((ret, _SECCOMP_RET_ALLOW))
    if not allow_subprocesses:
        code += [("clone",), (load, arg0), (jset, _CLONE_THREAD, "allow", "eperm")]
    if signals_to_self_only:
        code += [("kill_check",), (load, arg0), (jeq, 0, "allow", None)]
        code += [(jeq, _PID_PLACEHOLDER, "allow", "eperm")]
        code += [("pid_check",), (load, arg0), (jeq, _PID_PLACEHOLDER, "allow", "eperm")]
    code += [("allow",), (ret, _SECCOMP_RET_ALLOW)]
    code += [("eperm",), (ret, _SECCOMP_RET_ERRNO | _EPERM)]
    code += [("enosys",), (ret, _SECCOMP_RET_ERRNO | _ENOSYS)]
    code += [("kill",), (ret, _SECCOMP_RET_KILL_PROCESS)]

    labels: dict[str, int] = {}
    instructions = []
    for item in code:
        if len(item) == 1:
            labels[item[0]] = len(instructions)
        else:
            instructions.append(item)
    program = bytearray()
    pid_slots = []
    for index, (opcode, constant, *targets) in enumerate(instructions):
        offsets = []
        for target in targets:
            offset = 0 if target is None else labels[target] - index - 1
            if not 0 <= offset <= 255:
                raise AssertionError(f"seccomp jump out of range at instruction {index}")
            offsets.append(offset)
        jump_true, jump_false = (offsets + [0, 0])[:2]
        if constant == _PID_PLACEHOLDER:
            pid_slots.append(index)
        program += struct.pack("<HBBI", opcode, jump_true, jump_false, constant)
    return bytes(program), pid_slots


# ---------------------------------------------------------------------------------------------
# code that runs in the child processes: shipped as source with ``python -c`` (self-contained)
# ---------------------------------------------------------------------------------------------

_SOURCES: dict[str, str] = {}
_OWN_FILENAME = "<aloft-sandbox>"


def _function_source(function: Any) -> str:
    """``python -c`` text that runs ``function`` (compiled as ``<aloft-sandbox>``, so tracebacks
    can leave its frames out)."""
    name = function.__name__
    if name not in _SOURCES:
        source = textwrap.dedent(inspect.getsource(function)) + f"\n{name}()\n"
        _SOURCES[name] = f"exec(compile({source!r}, {_OWN_FILENAME!r}, 'exec'))"
    return _SOURCES[name]


def _launcher_source() -> str:
    return _function_source(_launcher_main)


def _bootstrap_source() -> str:
    return _function_source(_bootstrap_main)


def _launcher_main() -> None:  # pragma: no cover - runs in the sandbox's launcher process
    """Build the sandbox from the config file in argv[1], then execve the bootstrap interpreter.

    Runs as ``python -I -S -c <this source> config.json``, single-threaded, with the host's
    privileges. On any failure it writes ``error <message>`` to the status pipe and exits 125.
    """
    import ctypes
    import json
    import os
    import resource
    import signal
    import sys

    with open(sys.argv[1]) as handle:
        config = json.load(handle)
    status_fd = config["status_fd"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec, ms_private = (
        1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
    )  # fmt: skip
    pr_set_pdeathsig, pr_set_no_new_privs = 1, 38

    def check(result: int, what: str) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    def mount(
        source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
    ) -> None:
        encode = os.fsencode
        check(
            libc.mount(
                encode(source) if source else None,
                encode(target),
                encode(fstype) if fstype else None,
                flags,
                encode(data) if data else None,
            ),
            f"mount {target}",
        )

    def readonly_flags(path: str) -> int:
        # Keep the flags a remount may not clear (inside a user namespace they are locked).
        flags = os.statvfs(path).f_flag
        kept = 0
        for statvfs_flag, mount_flag in (
            (os.ST_NOSUID, ms_nosuid),
            (os.ST_NODEV, ms_nodev),
            (os.ST_NOEXEC, ms_noexec),
        ):
            if flags & statvfs_flag:
                kept |= mount_flag
        for statvfs_flag, mount_flag in (
            (os.ST_NOATIME, 1024),
            (os.ST_NODIRATIME, 2048),
            (os.ST_RELATIME, 1 << 21),
        ):
            if flags & statvfs_flag:
                kept |= mount_flag
        return kept | ms_rdonly | ms_nosuid

    def write_file(path: str, text: str, mode: int, uid: int | None) -> None:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(
            os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8"
        ) as handle:
            handle.write(text)
        if uid is not None:
            os.chown(path, uid, uid)

    def mount_points_under(root: str) -> list[str]:
        points = []
        with open("/proc/self/mountinfo", "rb") as handle:
            for line in handle:
                raw = line.split(b" ")[4]
                point = os.fsdecode(
                    raw.replace(b"\\040", b" ").replace(b"\\011", b"\t").replace(b"\\134", b"\\")
                )
                if point.startswith(root + "/"):
                    points.append(point)
        return points

    def build_root(uid: int) -> None:
        """Mount namespace: a tmpfs root with read-only binds; pivot_root into it."""
        root = config["root"]
        workdir = config["workdir"]
        os.umask(0o022)
        os.makedirs(root, exist_ok=True)
        mount(None, "/", None, ms_rec | ms_private)
        size = len(config["code"].encode()) + (4 << 20)
        mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, f"mode=0755,size={size}")
        for source in config["binds"]:
            target = root + source
            if os.path.isdir(source):
                os.makedirs(target, mode=0o755, exist_ok=True)
            else:
                write_file(target, "", 0o644, None)
            mount(source, target, None, ms_bind | ms_rec)
        for path, target in config["symlinks"]:
            os.symlink(target, root + path)
        os.makedirs(root + "/dev", mode=0o755)
        devices = []
        for name in ("null", "zero", "full", "random", "urandom"):
            write_file(f"{root}/dev/{name}", "", 0o666, None)
            mount(f"/dev/{name}", f"{root}/dev/{name}", None, ms_bind)
            devices.append(f"{root}/dev/{name}")
        for point in mount_points_under(root):
            if point not in devices:
                mount(None, point, None, ms_remount | ms_bind | readonly_flags(point))
        os.makedirs(root + workdir, mode=0o755)
        inodes = 4096 + 2 * len(config["files"])
        mount(
            "tmpfs",
            root + workdir,
            "tmpfs",
            ms_nosuid | ms_nodev,
            f"mode=0700,size={config['disk_bytes']},nr_inodes={inodes},uid={uid},gid={uid}",
        )
        for name, text in config["files"].items():
            write_file(f"{root}{workdir}/{name}", text, 0o644, uid)
            parent = os.path.dirname(name)
            while parent:
                os.chown(f"{root}{workdir}/{parent}", uid, uid)
                parent = os.path.dirname(parent)
        os.symlink(workdir, root + "/tmp")
        write_file(root + "/.aloft/main.py", config["code"], 0o644, None)
        os.chdir(root)
        pivot_root = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
        libc.syscall.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_char_p]
        if pivot_root is not None and libc.syscall(pivot_root, b".", b".") == 0:
            check(libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH
        else:  # e.g. the host root is no mount point: chroot (the code has no capability to leave it)
            os.chroot(".")
        os.chdir("/")
        mount(None, "/", None, ms_remount | ms_rdonly | ms_nosuid | ms_nodev)
        os.chdir(workdir)

    def supervise(child: int) -> None:
        """Outside the new pid namespace: wait for its init and exit the same way."""
        os.close(status_fd)
        _, status = os.waitpid(child, 0)
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), number)
        os._exit(128 + number)

    def user_task_count(uid: int) -> int:
        """Tasks (threads included) whose real uid is ``uid``: what RLIMIT_NPROC counts."""
        count = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/status", "rb") as handle:
                    fields = dict(line.split(b":", 1) for line in handle if b":" in line)
            except OSError:
                continue
            if int(fields.get(b"Uid", b"-1 ").split()[0]) == uid:
                count += int(fields.get(b"Threads", b"1").strip() or 1)
        return count

    def drop_privileges(uid: int) -> None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    def init(child: int) -> None:
        """pid 1 of the new pid namespace: reap everything; report the code's status; exit (which
        kills whatever is left in the namespace)."""
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                os._exit(0)
            if pid == child:
                os.write(status_fd, f"exit {status}\n".encode())
                os._exit(0)

    try:
        check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        mode = config["mode"]
        uid = config["uid"]
        # Same-uid modes: RLIMIT_NPROC counts all of the user's tasks, so allow what exists + the quota.
        tasks = 0 if uid is not None else user_task_count(os.getuid()) + 2
        if mode in ("namespaces", "user_namespaces"):
            flags = 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000  # NS NET PID IPC UTS
            outer_uid, outer_gid = os.geteuid(), os.getegid()
            if mode == "user_namespaces":
                flags |= 0x10000000  # CLONE_NEWUSER
            check(libc.unshare(flags), "unshare")
            if mode == "user_namespaces":
                with open("/proc/self/setgroups", "w") as handle:
                    handle.write("deny")
                with open("/proc/self/uid_map", "w") as handle:
                    handle.write(f"{outer_uid} {outer_uid} 1")
                with open("/proc/self/gid_map", "w") as handle:
                    handle.write(f"{outer_gid} {outer_gid} 1")
            child = os.fork()
            if child:
                supervise(child)
            check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
            build_root(uid if uid is not None else outer_uid)
            if uid is not None:
                drop_privileges(uid)
            tasks += 1  # this init
            os.set_inheritable(status_fd, True)
            child = os.fork()
            if child:
                init(child)
        else:
            workdir = config["workdir"]
            os.mkdir(workdir, 0o700)
            for name, text in config["files"].items():
                write_file(os.path.join(workdir, name), text, 0o644, uid)
            if uid is not None:
                for directory, names, _ in os.walk(workdir):
                    os.chown(directory, uid, uid)
                    for name in names:
                        os.chown(os.path.join(directory, name), uid, uid)
            stage = config["stage"]
            write_file(os.path.join(stage, "main.py"), config["code"], 0o644, None)
            os.chdir(workdir)
            if uid is not None:
                drop_privileges(uid)
        check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        check(libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        limits = {
            resource.RLIMIT_CPU: (config["cpu_s"], config["cpu_s"] + 1),
            resource.RLIMIT_AS: (config["memory_bytes"],) * 2,
            resource.RLIMIT_NPROC: (tasks + config["max_processes"],) * 2,
            resource.RLIMIT_FSIZE: (config["file_bytes"],) * 2,
            resource.RLIMIT_NOFILE: (config["max_open_files"],) * 2,
            resource.RLIMIT_CORE: (0, 0),
        }
        for which, (soft, hard) in limits.items():
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))
        os.set_inheritable(status_fd, True)
        os.execve(config["python"], config["argv"], config["env"])
    except BaseException as error:  # report anything to the host, then exit
        message = f"error {type(error).__name__}: {error}".replace("\n", " ") + "\n"
        try:
            os.write(status_fd, message.encode("utf-8", "replace"))
        finally:
            os._exit(125)


def _bootstrap_main() -> None:  # pragma: no cover - runs inside the sandbox
    """Install seccomp and the audit hook, say "ready", then run ``main.py`` as ``__main__``.

    Runs as ``python -s -P -B -u [-S] -c <this source> aloft-sandbox:<run id> <json config>``.
    """
    import json
    import os
    import sys

    config = json.loads(sys.argv[2])
    status_fd = config["status_fd"]
    try:
        with open(config["code_path"], encoding="utf-8") as handle:
            source = handle.read()
        if config["seccomp"]:
            import ctypes
            import struct

            program = bytearray.fromhex(config["seccomp"])
            for index in config["seccomp_pid_slots"]:
                struct.pack_into("<I", program, index * 8 + 4, os.getpid())

            class SockFprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl.argtypes = [
                ctypes.c_int,
                ctypes.c_ulong,
                ctypes.c_ulong,
                ctypes.c_ulong,
                ctypes.c_ulong,
            ]
            buffer = ctypes.create_string_buffer(bytes(program), len(program))
            fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
            if libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
                raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")
            del libc, buffer, fprog, SockFprog
            for name in [name for name in sys.modules if name == "_ctypes" or name.split(".")[0] == "ctypes"]:
                del sys.modules[name]
        import builtins
        import linecache
        import traceback
        import types

        if not hasattr(builtins, "exit"):  # -S skips site, which defines exit() and quit()

            class Quitter:
                def __init__(self, name: str) -> None:
                    self.name = name

                def __repr__(self) -> str:
                    return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

                def __call__(self, code: object = None) -> None:
                    raise SystemExit(code)

            builtins.exit, builtins.quit = Quitter("exit"), Quitter("quit")

        if config["audit_hook"]:
            workdir = os.path.realpath(config["workdir"])
            write_roots = (workdir, "/dev/null")
            read_roots = tuple(config["read_roots"])
            allow_subprocesses = config["allow_subprocesses"]
            block_ctypes = config["block_ctypes"]
            own_pid = os.getpid()
            realpath, fsdecode = os.path.realpath, os.fsdecode
            write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            process_events = frozenset(
                ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")
                + ("subprocess.Popen", "os.startfile", "pty.spawn")
            )
            write_events = frozenset(
                ("os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "os.truncate")
                + ("os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchflags", "os.setxattr")
                + ("os.removexattr", "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat")
                + (
                    "shutil.copytree",
                    "shutil.move",
                    "shutil.chown",
                    "shutil.make_archive",
                    "shutil.unpack_archive",
                )
            )

            def inside(path: object, roots: tuple) -> bool:
                if isinstance(path, int) or path is None:
                    return True
                if not isinstance(path, str | bytes | os.PathLike):
                    return True
                resolved = realpath(fsdecode(path))
                return any(resolved == root or resolved.startswith(root.rstrip("/") + "/") for root in roots)

            def hook(event: str, args: tuple) -> None:
                if event == "open":
                    path, mode, flags = (tuple(args) + (None, None, None))[:3]
                    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                        isinstance(flags, int) and flags & write_flags
                    )
                    if writing and not inside(path, write_roots):
                        raise PermissionError(
                            f"sandbox: writing {path!r} is not allowed (only under {workdir})"
                        )
                    if not writing and not inside(path, read_roots):
                        raise PermissionError(f"sandbox: reading {path!r} is not allowed")
                elif event.startswith("socket."):
                    raise PermissionError("sandbox: network access is disabled")
                elif block_ctypes and event.startswith("ctypes."):
                    raise PermissionError("sandbox: ctypes is disabled")
                elif event in process_events and not allow_subprocesses:
                    raise PermissionError("sandbox: starting processes is disabled")
                elif (
                    event in ("os.kill", "os.killpg")
                    and not allow_subprocesses
                    and args[0] not in (0, own_pid)
                ):
                    raise PermissionError("sandbox: signalling other processes is disabled")
                elif event in write_events:
                    for path in args:
                        if isinstance(path, str | bytes | os.PathLike) and not inside(path, write_roots):
                            raise PermissionError(
                                f"sandbox: changing {path!r} is not allowed (only under {workdir})"
                            )
                elif event in ("os.listdir", "os.scandir") and args and not inside(args[0], read_roots):
                    raise PermissionError(f"sandbox: listing {args[0]!r} is not allowed")

            sys.addaudithook(hook)
    except BaseException as error:  # report anything to the host, then exit
        os.write(status_fd, f"error bootstrap: {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
        os._exit(125)

    os.write(status_fd, b"ready\n")
    os.close(status_fd)
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = ["main.py"]
    sys.path.insert(0, config["workdir"])
    linecache.cache["main.py"] = (len(source), None, source.splitlines(True), "main.py")
    try:
        exec(compile(source, "main.py", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as error:
        # Print it as Python would, without the frames of this bootstrap (its audit hook included).
        report = traceback.TracebackException.from_exception(error)
        pending = [report]
        while pending:
            part = pending.pop()
            part.stack = traceback.StackSummary.from_list(
                [frame for frame in part.stack if frame.filename != "<aloft-sandbox>"]
            )
            pending += [chained for chained in (part.__cause__, part.__context__) if chained is not None]
        sys.stderr.write("".join(report.format()))
        sys.stderr.flush()
        sys.exit(1)
