"""A KV-cache layer for continuous batching that appends, admits and drops rows in place.

transformers' ``DynamicLayer`` appends a decoded token with ``torch.cat`` (a copy of the layer's whole
cache per token), and the obvious ways to add rows to a running batch or drop finished ones copy the
whole cache again. ``AppendableLayer`` keeps keys and values in buffers with room on both axes:

- buffers ``[R, H, C, D]``: R rows of capacity, C columns;
- the live window ``keys = buffer[:rows, :, start:end]`` (``[B, H, W, D]``), what attention reads.

A decode step writes one column. Joining rows are written into free rows, right-aligned with the
others (every row is left-padded to the common width W). A finished row's slot is refilled by moving
one later row into it, so dropping k rows copies k rows, not the cache. Trimming all-padding columns
on the left moves ``start``. The buffers are rebuilt only when a side runs out of room.

Columns of the window that are padding for a row are zero, never uninitialised memory: attention
masks them, but a masked NaN still poisons the softmax and the weighted sum.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

SPARE_COLUMNS = 128
"""Columns of room added on the right whenever a buffer is (re)built: one copy per this many steps at
most (more when one update appends more than this at once)."""


class AppendableLayer(DynamicLayer):
    """A full-attention cache layer (a ``DynamicLayer`` to transformers) updated in place."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, row_capacity: int = 0) -> None:
        """Take over ``keys`` / ``values`` (``[B, H, W, D]``) of a filled layer; room for ``row_capacity`` rows."""
        super().__init__()
        self.device = keys.device
        self.is_initialized = True
        self._rebuild(keys, values, max(row_capacity, keys.shape[0]))

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def width(self) -> int:
        return self._end - self._start

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append ``[B, H, N, D]`` new states on the right; return the whole window (as transformers expects)."""
        new = key_states.shape[-2]
        if self._end + new > self._keys_buffer.shape[2]:
            self._rebuild(self.keys, self.values, self._keys_buffer.shape[0], room=new)
        self._keys_buffer[: self._rows, :, self._end : self._end + new] = key_states
        self._values_buffer[: self._rows, :, self._end : self._end + new] = value_states
        self._end += new
        self._sync()
        return self.keys, self.values

    def keep_rows(self, order: list[int]) -> None:
        """Keep the rows ``order`` (old row indices), in that order; only rows that change place are copied."""
        moves = [(new, old) for new, old in enumerate(order) if new != old]
        if moves:
            target = torch.tensor([new for new, _ in moves], device=self.device)
            source = torch.tensor([old for _, old in moves], device=self.device)
            window = slice(self._start, self._end)
            # Advanced indexing on the right gathers a copy first, so any permutation is safe.
            self._keys_buffer[target, :, window] = self._keys_buffer[source, :, window]
            self._values_buffer[target, :, window] = self._values_buffer[source, :, window]
        self._rows = len(order)
        self._sync()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """transformers' name for ``keep_rows``."""
        self.keep_rows([int(i) for i in indices])

    def trim_left(self, columns: int) -> None:
        """Forget the ``columns`` leftmost columns (no copy)."""
        self._start += min(columns, self.width)
        self._sync()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the ``-tokens_to_remove`` rightmost columns (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of columns to remove, got {tokens_to_remove}")
        self._end = max(self._start, self._end + tokens_to_remove)
        self._sync()

    def join(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add rows ``[B2, H, W2, D]`` after the current ones, right-aligned; the narrower side gets zero padding."""
        joining, width = keys.shape[0], keys.shape[2]
        missing = width - self.width
        if missing > self._start or self._rows + joining > self._keys_buffer.shape[0]:
            rows = max(self._rows + joining, self._keys_buffer.shape[0])
            full = max(width, self.width)
            self._rebuild(_left_pad(self.keys, full), _left_pad(self.values, full), rows)
        elif missing > 0:
            self._start -= missing
            self._keys_buffer[: self._rows, :, self._start : self._start + missing] = 0
            self._values_buffer[: self._rows, :, self._start : self._start + missing] = 0
        new_rows = slice(self._rows, self._rows + joining)
        pad_end = self._end - width
        self._keys_buffer[new_rows, :, self._start : pad_end] = 0
        self._values_buffer[new_rows, :, self._start : pad_end] = 0
        self._keys_buffer[new_rows, :, pad_end : self._end] = keys
        self._values_buffer[new_rows, :, pad_end : self._end] = values
        self._rows += joining
        self._sync()

    def _rebuild(self, keys: torch.Tensor, values: torch.Tensor, row_capacity: int, room: int = 0) -> None:
        """New buffers holding ``keys`` / ``values`` with ``room`` free columns on the right (at least
        ``SPARE_COLUMNS``: a continuation may append a whole observation at once)."""
        rows, _, width, _ = keys.shape
        columns = width + max(room, SPARE_COLUMNS)
        self._keys_buffer = keys.new_empty((row_capacity, keys.shape[1], columns, keys.shape[3]))
        self._values_buffer = values.new_empty((row_capacity, values.shape[1], columns, values.shape[3]))
        self._keys_buffer[:rows, :, :width] = keys
        self._values_buffer[:rows, :, :width] = values
        self._rows, self._start, self._end = rows, 0, width
        self._sync()

    def _sync(self) -> None:
        self.keys = self._keys_buffer[: self._rows, :, self._start : self._end]
        self.values = self._values_buffer[: self._rows, :, self._start : self._end]


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, H, W, D]`` -> ``[B, H, width, D]`` with zero columns on the left."""
    return torch.nn.functional.pad(states, (0, 0, width - states.shape[-2], 0))
