"""Seeding a training process: Python's, NumPy's and torch's generators, threads, determinism.

Its own module so that Ray's learner actors (aloft.placement) seed as the local trainer does without
importing the trainer's wiring, which imports placement.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int, deterministic: bool, num_threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if num_threads:
        torch.set_num_threads(num_threads)
    if deterministic:
        torch.use_deterministic_algorithms(True)
