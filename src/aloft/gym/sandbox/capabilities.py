"""The capability probe: which isolation mode works on this host, strongest first.

``_probe`` runs ``print('ok')`` under each candidate (``_candidates``, narrowed by
``ALOFT_SANDBOX_MODE``), with and without seccomp, and keeps the first that works; the package's
``sandbox_capabilities`` caches its answer.
"""

from __future__ import annotations

import os
import platform

from .api import MODES, SandboxCapabilities, SandboxError, SandboxLimits
from .seccomp import _seccomp_arch
from .supervise import _one_line, _run_under


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
                result = _run_under("print('ok')", "", SandboxLimits(wall_s=20, cpu_s=10), None, capabilities)
            except (SandboxError, OSError) as error:
                notes.append(f"{mode}{'' if seccomp else ' without seccomp'}: {_one_line(str(error))}")
                continue
            if result.stdout == "ok\n" and result.ok:
                return _capabilities_of(mode, separate_uid, seccomp, notes)
            detail = _one_line(result.stderr) or f"exit code {result.exit_code}"
            notes.append(f"{mode}{'' if seccomp else ' without seccomp'}: probe failed ({detail})")
    raise SandboxError("no sandbox mode works on this host: " + "; ".join(notes))
