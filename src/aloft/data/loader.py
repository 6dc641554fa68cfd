"""``PromptLoader``: endless, deterministic, resumable batches of dataset rows.

Epoch ``e`` visits the rows in the order of a permutation drawn from ``random.Random(seed + e)``
(or in file order without shuffling). The loader's whole position is ``(epoch, cursor)``, the
number of rows of that epoch's order already handed out, so ``state_dict`` / ``load_state_dict``
let a resumed run see exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["PromptLoader"]

RowT = TypeVar("RowT")
_STATE_KEYS = ("epoch", "cursor", "seed", "num_rows")


class PromptLoader(Generic[RowT]):
    """Batches of ``batch_size`` rows, forever, across epochs.

    ``drop_last=True``: every batch is full; the ``len(rows) % batch_size`` rows left at the end of
    an epoch's order are skipped that epoch (a different set each epoch when shuffling).
    ``drop_last=False``: the last batch of an epoch holds the remainder and may be smaller.
    """

    def __init__(
        self,
        rows: Sequence[RowT],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        if not rows:
            raise ValueError("PromptLoader got no rows; check the dataset file")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"PromptLoader batch_size must be a positive integer, got {batch_size!r}")
        if batch_size > len(rows):
            raise ValueError(
                f"PromptLoader batch_size {batch_size} is larger than the dataset ({len(rows)} rows); "
                "lower the batch size or add rows"
            )
        self.rows = rows
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.cursor = 0
        self._order_epoch: int | None = None
        self._order: list[int] = []

    @property
    def batches_per_epoch(self) -> int:
        full, remainder = divmod(len(self.rows), self.batch_size)
        return full + (1 if remainder and not self.drop_last else 0)

    def next_batch(self) -> list[RowT]:
        """The next batch; moves on to a new epoch (and a new order) when this one is used up."""
        remaining = len(self.rows) - self.cursor
        if remaining == 0 or (self.drop_last and remaining < self.batch_size):
            self.epoch += 1
            self.cursor = 0
        order = self._epoch_order()
        batch_indices = order[self.cursor : self.cursor + self.batch_size]
        self.cursor += len(batch_indices)
        return [self.rows[index] for index in batch_indices]

    def __iter__(self) -> Iterator[list[RowT]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "cursor", "seed", "num_rows"}``: everything needed to resume."""
        return {"epoch": self.epoch, "cursor": self.cursor, "seed": self.seed, "num_rows": len(self.rows)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state_dict()``; the dataset and the seed must be the ones it was saved with."""
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"PromptLoader state is missing {missing}; pass the dict saved by state_dict()")
        if state["num_rows"] != len(self.rows):
            raise ValueError(
                f"PromptLoader state was saved for a dataset of {state['num_rows']} rows, but this one has "
                f"{len(self.rows)}; resume with the same dataset file or start a new run"
            )
        if state["seed"] != self.seed:
            raise ValueError(
                f"PromptLoader state was saved with seed {state['seed']}, but this loader has seed {self.seed}; "
                "resume with the same seed or start a new run"
            )
        epoch, cursor = state["epoch"], state["cursor"]
        if not (
            isinstance(epoch, int)
            and epoch >= 0
            and isinstance(cursor, int)
            and 0 <= cursor <= len(self.rows)
        ):
            raise ValueError(
                f"PromptLoader state has epoch={epoch!r}, cursor={cursor!r}; expected epoch >= 0 and "
                f"0 <= cursor <= {len(self.rows)}"
            )
        self.epoch, self.cursor = epoch, cursor

    def _epoch_order(self) -> list[int]:
        if self._order_epoch != self.epoch:
            self._order = list(range(len(self.rows)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(self._order)
            self._order_epoch = self.epoch
        return self._order
