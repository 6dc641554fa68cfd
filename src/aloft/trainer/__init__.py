"""Execution plans and wiring: the synchronous trainer, eval, checkpoints and resume."""

from aloft.trainer.evaluation import evaluate, pass_at_k, summarize_groups
from aloft.trainer.trainer import Trainer, train

__all__ = ["Trainer", "evaluate", "pass_at_k", "summarize_groups", "train"]
