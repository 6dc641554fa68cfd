"""Multi-process pieces: weight sync over torch.distributed groups."""

from aloft.distributed.group import free_loopback_port, init_loopback_group
from aloft.distributed.weight_sync import (
    SyncStats,
    WeightReceiver,
    WeightSender,
    plan_buckets,
)

__all__ = [
    "SyncStats",
    "WeightReceiver",
    "WeightSender",
    "free_loopback_port",
    "init_loopback_group",
    "plan_buckets",
]
