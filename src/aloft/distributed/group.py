"""Starting torch.distributed process groups on one machine (tests, benchmarks, single-node runs)."""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (for a group's rendezvous)."""
    return free_port(LOOPBACK)


def free_port(host: str) -> int:
    """A TCP port that was free on ``host`` (an address of this machine) a moment ago."""
    with socket.socket() as probe:
        probe.bind((host, 0))
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


def group_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where ``group``'s collectives take their tensors: this rank's current GPU under NCCL, else
    the CPU (gloo)."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def side_group(
    host: str,
    port: int,
    rank: int,
    world_size: int,
    name: str,
    backend: str = "gloo",
    timeout_s: float = 1800,
) -> dist.ProcessGroup:
    """A process group of its own, beside (or without) the process's default group.

    Weight sync needs one: the trainer's rank 0 is already in its training group, and the engines
    are in none. Rank 0 hosts the rendezvous store at ``host:port``. Use the group's collectives
    with ``group=`` and ``group_src=`` (ranks are this group's).
    """
    if host == LOOPBACK:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
    # torch's public new_group() needs every member in one default group; this group is built from
    # its own store instead (the helper vLLM, OpenRLHF and SkyRL use for the same purpose).
    from torch.distributed.distributed_c10d import _new_process_group_helper

    group, _ = _new_process_group_helper(
        world_size, rank, [], backend, dist.PrefixStore(name, store), group_name=name, timeout=timeout
    )
    return group


def leave_spawned_rank() -> None:
    """End a spawned rank's process now, exit code 0, once its work is handed over and its group is
    destroyed: without the interpreter's exit-time teardown, where a library thread still alive
    has aborted a rank that had finished ("terminate called without an active exception", SIGABRT,
    seen with DeepSpeed ZeRO-3 on gloo), failing a run or test that had succeeded."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
