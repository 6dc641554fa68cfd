"""``mix_seed``: one stable seed from several integers (a run's seed, a step, a round, a sample).

Standard library only, at the bottom of the layers: rollout seeds each sample with it, and the trainer
its rounds of sampling and the learner its mini-batch order.
"""

from __future__ import annotations

__all__ = ["mix_seed"]


def mix_seed(*values: int) -> int:
    """A stable 63-bit FNV-1a hash of integers (Python's hash() of ints is stable but too regular:
    seeds s, s+1, ... would give neighbouring streams)."""
    h = 0xCBF29CE484222325
    for v in values:
        for byte in int(v).to_bytes(8, "little", signed=True):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h & 0x7FFFFFFFFFFFFFFF
