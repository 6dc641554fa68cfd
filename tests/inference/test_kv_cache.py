"""AppendableLayer (in-place KV cache for continuous batching) against plain tensors, op by op."""

from __future__ import annotations

import random

import pytest
import torch

from aloft.inference import kv_cache
from aloft.inference.decoding import _fill_holes
from aloft.inference.kv_cache import AppendableLayer

HEADS, DIM = 2, 4


def states(rows: int, width: int, generator: torch.Generator) -> torch.Tensor:
    # Values in [1, 2): a zero can only be padding, so the test can tell padding from data.
    return 1 + torch.rand((rows, HEADS, width, DIM), generator=generator)


def left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, 0, width - x.shape[2], 0))


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_plain_tensors(seed, monkeypatch):
    """Appends (one column or many), joins (narrower and wider), drops with reordering and left trims,
    as a decoder does them."""
    monkeypatch.setattr(kv_cache, "SPARE_COLUMNS", 3)  # runs out of columns often: the rebuild path runs too
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    keys, values = states(3, 5, gen), states(3, 5, gen) + 10
    layer = AppendableLayer(keys.clone(), values.clone(), row_capacity=rng.choice([0, 4, 8]))
    for _ in range(60):
        op = rng.choice(["update", "update", "join", "keep", "trim"])
        if op == "update":
            # Mostly one decoded column; sometimes a continuation's whole observation at once, wider
            # than the spare room a rebuild adds.
            width = 1 if rng.random() < 0.7 else rng.randint(2, 8)
            new_k, new_v = states(keys.shape[0], width, gen), states(keys.shape[0], width, gen) + 10
            out_k, out_v = layer.update(new_k, new_v)
            keys, values = torch.cat([keys, new_k], dim=2), torch.cat([values, new_v], dim=2)
            assert torch.equal(out_k, keys) and torch.equal(out_v, values)
        elif op == "join":
            rows, width = rng.randint(1, 3), rng.randint(1, keys.shape[2] + 3)
            new_k, new_v = states(rows, width, gen), states(rows, width, gen) + 10
            layer.join(new_k, new_v)
            full = max(width, keys.shape[2])
            keys = torch.cat([left_pad(keys, full), left_pad(new_k, full)])
            values = torch.cat([left_pad(values, full), left_pad(new_v, full)])
        elif op == "keep" and keys.shape[0] > 1:
            finished = sorted(rng.sample(range(keys.shape[0]), rng.randint(1, keys.shape[0] - 1)))
            order = _fill_holes(keys.shape[0], finished)
            layer.keep_rows(order)
            keys, values = keys[order], values[order]
        elif op == "trim":
            columns = rng.randint(0, 2)
            layer.trim_left(columns)
            keys, values = keys[:, :, columns:], values[:, :, columns:]
        assert layer.rows == keys.shape[0] and layer.width == keys.shape[2]
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values), op


def test_padding_is_zero_even_in_reused_memory():
    """Rows that join into freed slots get zeros, not what the previous occupant left there."""
    gen = torch.Generator().manual_seed(0)
    layer = AppendableLayer(states(4, 6, gen), states(4, 6, gen), row_capacity=4)
    layer.keep_rows([0, 1])  # rows 2 and 3 are free but still hold data
    layer.join(states(2, 2, gen), states(2, 2, gen))
    assert torch.count_nonzero(layer.keys[2:, :, :4]) == 0
    assert torch.count_nonzero(layer.values[2:, :, :4]) == 0
    assert torch.all(layer.keys[2:, :, 4:] >= 1)


def test_fill_holes_moves_one_row_per_finished_row():
    assert _fill_holes(5, [1]) == [0, 4, 2, 3]  # the last row takes the hole
    assert _fill_holes(5, [3, 4]) == [0, 1, 2]  # finished rows at the end: nothing moves
    assert _fill_holes(6, [0, 2, 5]) == [3, 1, 4]
    assert _fill_holes(3, [0, 1, 2]) == []
    for rows in range(1, 8):
        for mask in range(1 << rows):
            finished = [p for p in range(rows) if mask >> p & 1]
            order = _fill_holes(rows, finished)
            assert sorted(order) == [p for p in range(rows) if p not in finished]
            moved = sum(1 for new, old in enumerate(order) if new != old)
            assert moved == sum(1 for p in finished if p < len(order))
