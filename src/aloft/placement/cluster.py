"""Starting or joining a Ray cluster, with every address of a local one on loopback."""

from __future__ import annotations

import os
import sys

LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",  # no usage report leaves the machine
}
"""Set (unless the user set them) before a local instance starts (CONTRIBUTING.md, "Known behaviour of the stack")."""


def connect(address: str | None, num_cpus: int, num_gpus: int = 0) -> None:
    """Join the cluster at ``address`` ("auto", "ray://host:10001"), or with ``address=None`` start a
    Ray instance on this machine bound to 127.0.0.1 with at least ``num_cpus`` logical CPUs (it may
    promise more CPUs than the machine has: actors share cores, and each sets its own thread count).
    A no-op when this process is already connected."""
    if address is None:
        # Before Ray's first import: it reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER at import time.
        for name, value in LOOPBACK_ENV.items():
            os.environ.setdefault(name, value)
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address)
        return
    ray.init(
        num_cpus=max(num_cpus, os.cpu_count() or 1),
        num_gpus=num_gpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env={
            "env_vars": {**{name: os.environ[name] for name in LOOPBACK_ENV}, "PYTHONPATH": _driver_path()}
        },
    )


def _driver_path() -> str:
    """The driver's import path, for the actors of a local instance: a plugin module the driver can
    import (``trainer.imports``) is importable in every actor too. Clusters ship code themselves."""
    return os.pathsep.join(path for path in [os.getcwd(), *sys.path] if path and os.path.isdir(path))
