"""PromptLoader: deterministic batches across epochs, and resume that replays the same sequence."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.data import PromptLoader

ROWS = list(range(10))  # any sequence works; integers make batches easy to read


def take(loader: PromptLoader, steps: int) -> list[list[int]]:
    return [loader.next_batch() for _ in range(steps)]


def test_unshuffled_drop_last_skips_the_remainder_and_wraps():
    loader = PromptLoader(ROWS, batch_size=4, shuffle=False)
    assert loader.batches_per_epoch == 2
    assert take(loader, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]  # rows 8, 9 dropped in epoch 0
    assert loader.state_dict() == {"epoch": 1, "cursor": 4, "seed": 0, "num_rows": 10}


def test_unshuffled_keep_last_gives_a_short_final_batch():
    loader = PromptLoader(ROWS, batch_size=4, shuffle=False, drop_last=False)
    assert loader.batches_per_epoch == 3
    assert take(loader, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [0, 1, 2, 3]]


def test_each_shuffled_epoch_is_a_new_permutation():
    loader = PromptLoader(ROWS, batch_size=5, seed=7)
    epochs = [sum(take(loader, 2), []) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == ROWS  # every row exactly once per epoch
    assert len({tuple(order) for order in epochs}) == 3


def test_epoch_order_comes_from_seed_plus_epoch():
    # Epoch 1 of seed 3 is drawn like epoch 0 of seed 4.
    seed_3 = PromptLoader(ROWS, batch_size=10, seed=3)
    seed_4 = PromptLoader(ROWS, batch_size=10, seed=4)
    assert take(seed_3, 2)[1] == take(seed_4, 1)[0]


def test_same_seed_same_sequence_other_seed_other_sequence():
    sequence = take(PromptLoader(ROWS, batch_size=3, seed=1), 8)
    assert take(PromptLoader(ROWS, batch_size=3, seed=1), 8) == sequence
    assert take(PromptLoader(ROWS, batch_size=3, seed=2), 8) != sequence


def test_iteration_is_endless_next_batch():
    loader = PromptLoader(ROWS, batch_size=4, shuffle=False)
    batches = iter(loader)
    assert [next(batches) for _ in range(5)] == take(PromptLoader(ROWS, batch_size=4, shuffle=False), 5)


@settings(max_examples=60, deadline=None)
@given(
    num_rows=st.integers(1, 25),
    data=st.data(),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31),
    steps_before=st.integers(0, 30),
)
def test_resume_from_state_dict_replays_the_uninterrupted_sequence(
    num_rows, data, shuffle, drop_last, seed, steps_before
):
    rows = list(range(num_rows))
    batch_size = data.draw(st.integers(1, num_rows), label="batch_size")
    uninterrupted = PromptLoader(rows, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
    take(uninterrupted, steps_before)
    state = json.loads(json.dumps(uninterrupted.state_dict()))  # survives a JSON checkpoint

    resumed = PromptLoader(rows, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
    resumed.load_state_dict(state)
    assert take(resumed, 12) == take(uninterrupted, 12)


@settings(max_examples=40, deadline=None)
@given(num_rows=st.integers(1, 25), data=st.data(), seed=st.integers(0, 1000))
def test_drop_last_batches_are_full_and_never_repeat_a_row_within_an_epoch(num_rows, data, seed):
    batch_size = data.draw(st.integers(1, num_rows), label="batch_size")
    loader = PromptLoader(list(range(num_rows)), batch_size, seed=seed)
    for _ in range(3):
        epoch_rows = sum(take(loader, loader.batches_per_epoch), [])
        assert len(epoch_rows) == len(set(epoch_rows)) == loader.batches_per_epoch * batch_size


def test_state_from_another_dataset_size_is_refused():
    state = PromptLoader(ROWS, batch_size=2).state_dict()
    with pytest.raises(
        ValueError, match="saved for a dataset of 10 rows, but this one has 9; resume with the same"
    ):
        PromptLoader(ROWS[:9], batch_size=2).load_state_dict(state)


def test_state_from_another_seed_is_refused():
    state = PromptLoader(ROWS, batch_size=2, seed=1).state_dict()
    with pytest.raises(ValueError, match="saved with seed 1, but this loader has seed 2"):
        PromptLoader(ROWS, batch_size=2, seed=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"epoch": 0, "cursor": 0}, r"missing \['seed', 'num_rows'\]"),
        ({"epoch": 0, "cursor": 11, "seed": 0, "num_rows": 10}, "cursor=11"),
        ({"epoch": -1, "cursor": 0, "seed": 0, "num_rows": 10}, "epoch=-1"),
    ],
)
def test_malformed_state_is_refused(state, message):
    with pytest.raises(ValueError, match=message):
        PromptLoader(ROWS, batch_size=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("rows", "batch_size", "message"),
    [
        (
            ROWS,
            11,
            "batch_size 11 is larger than the dataset \\(10 rows\\); lower the batch size or add rows",
        ),
        (ROWS, 0, "batch_size must be a positive integer, got 0"),
        ([], 1, "got no rows"),
    ],
)
def test_bad_construction_is_refused(rows, batch_size, message):
    with pytest.raises(ValueError, match=message):
        PromptLoader(rows, batch_size)


def test_shuffle_matches_python_random_so_orders_are_reproducible_elsewhere():
    # Documented contract: epoch e's order is random.Random(seed + e).shuffle(range(n)).
    expected = list(range(10))
    random.Random(5).shuffle(expected)
    assert PromptLoader(ROWS, batch_size=10, seed=5).next_batch() == expected
