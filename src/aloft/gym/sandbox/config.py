"""What the host hands the launcher: the checked files, the private root's layout, the JSON config,
and the launcher and bootstrap programs as ``python -c`` source text.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import secrets
import sys
import textwrap
from typing import Any

from .api import WORKDIR, SandboxCapabilities, SandboxLimits
from .bootstrap import _bootstrap_main
from .launcher import _launcher_main
from .seccomp import _seccomp_program


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


# ---------------------------------------------------------------------------------------------
# the child programs (launcher.py, bootstrap.py) as ``python -c`` source text (self-contained)
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
