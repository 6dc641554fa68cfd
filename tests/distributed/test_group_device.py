"""Collectives take their tensors where the group's backend wants them: the CPU under gloo."""

from __future__ import annotations

import torch
import torch.distributed as dist

from aloft.distributed import free_loopback_port, group_device, init_loopback_group


def test_a_gloo_group_takes_cpu_tensors():
    init_loopback_group(0, 1, free_loopback_port())
    try:
        assert group_device() == torch.device("cpu")
    finally:
        dist.destroy_process_group()
