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

Modules, lowest layer first: ``api`` (the data types and constants), ``seccomp`` (the BPF filter),
``launcher`` and ``bootstrap`` (the two programs that run in the child processes, shipped as source),
``config`` (what the host hands the launcher), ``supervise`` (the host side of one run),
``capabilities`` (the probe); this package holds the entry points and re-exports the rest.
"""

from __future__ import annotations

import threading

# ``X as X``: re-exported from where it lives (the constants, and the private names the tests use).
from .api import MODES as MODES
from .api import SETUP_TIMEOUT_S as SETUP_TIMEOUT_S
from .api import STATUS_READY as STATUS_READY
from .api import WORKDIR as WORKDIR
from .api import SandboxCapabilities, SandboxError, SandboxLimits, SandboxResult
from .capabilities import _capabilities_of as _capabilities_of
from .capabilities import _probe
from .seccomp import _seccomp_arch as _seccomp_arch
from .seccomp import _seccomp_program as _seccomp_program
from .supervise import _run_under

__all__ = [
    "SandboxCapabilities",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "run_python",
    "sandbox_capabilities",
]


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
    return _run_under(code, stdin, limits, files, capabilities or sandbox_capabilities, audit_hook=audit_hook)
