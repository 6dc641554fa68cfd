"""Multi-process pieces: weight sync over torch.distributed groups, or by handle between colocated processes."""

from aloft.distributed.group import (
    LOOPBACK,
    free_loopback_port,
    free_port,
    group_device,
    init_loopback_group,
    leave_spawned_rank,
    side_group,
)
from aloft.distributed.handles import SharedWeights, WeightsHandle, open_weights
from aloft.distributed.weight_sync import (
    SyncStats,
    WeightReceiver,
    WeightSender,
    plan_buckets,
)

__all__ = [
    "SharedWeights",
    "WeightsHandle",
    "open_weights",
    "LOOPBACK",
    "free_port",
    "group_device",
    "side_group",
    "SyncStats",
    "WeightReceiver",
    "WeightSender",
    "free_loopback_port",
    "init_loopback_group",
    "leave_spawned_rank",
    "plan_buckets",
]
