"""Training: model workers (policy, reference, critic), batches, checkpoint I/O."""

from aloft.training.batch import TrainBatch, collate, split_rows
from aloft.training.checkpoint import CheckpointManager
from aloft.training.workers import (
    CriticWorker,
    OptimSettings,
    PolicyWorker,
    ReferenceWorker,
    ValueModel,
)

__all__ = [
    "CheckpointManager",
    "CriticWorker",
    "OptimSettings",
    "PolicyWorker",
    "ReferenceWorker",
    "TrainBatch",
    "ValueModel",
    "collate",
    "split_rows",
]
