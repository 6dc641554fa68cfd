"""Starting torch.distributed process groups on one machine (tests, benchmarks, single-node runs)."""

from __future__ import annotations

import datetime
import os
import socket

import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for a group's rendezvous)."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def init_loopback_group(
    rank: int, world_size: int, port: int, backend: str = "gloo", timeout_s: float = 120
) -> None:
    """Join a ``world_size`` group whose rendezvous and gloo traffic stay on 127.0.0.1."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo would otherwise pick the host's first interface
    dist.init_process_group(
        backend,
        init_method=f"tcp://{LOOPBACK}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
