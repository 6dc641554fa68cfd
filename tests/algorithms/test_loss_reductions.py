"""Loss reductions and the LossNormalizer that makes them independent of micro-batching."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.algorithms import LOSS_REDUCTIONS, LossNormalizer, aggregate_loss, masked_mean, masked_whiten

# Row 0: three policy tokens [1, 2, 3]; row 1: one policy token [4] then padding; row 2: no policy
# token at all (e.g. filtered out), holding garbage.
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])


def test_normalizer_counts_policy_tokens_and_sequences_with_any():
    assert LossNormalizer.from_mask(MASK) == LossNormalizer(num_tokens=4, num_sequences=2, max_len=3)
    assert LossNormalizer.from_mask(MASK, max_len=8).max_len == 8


def test_normalizer_from_separately_padded_micro_batches():
    # Micro-batches padded to T=3 and T=5: counts add up, max_len defaults to the longest T.
    masks = [MASK, torch.tensor([[1, 1, 1, 1, 1]])]
    assert LossNormalizer.from_masks(masks) == LossNormalizer(num_tokens=9, num_sequences=3, max_len=5)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_mean", 2.5),  # (1 + 2 + 3 + 4) / 4 tokens
        ("seq_mean_token_mean", 3.0),  # (mean(1, 2, 3) = 2  +  4) / 2 sequences; the empty row adds 0
        ("seq_mean_token_sum", 5.0),  # ((1 + 2 + 3) + 4) / 2 sequences; the empty row adds 0
        ("seq_mean_token_sum_norm", 10 / 6),  # 10 / (max_len T=3 * 2 sequences)
    ],
)
def test_reductions_by_hand(mode, expected):
    assert aggregate_loss(VALUES, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_divides_by_the_given_max_len():
    # Dr.GRPO's constant: 10 / (max_len 5 * 2 sequences) = 1.0.
    normalizer = LossNormalizer.from_mask(MASK, max_len=5)
    assert aggregate_loss(VALUES, MASK, "seq_mean_token_sum_norm", normalizer).item() == pytest.approx(1.0)


@pytest.mark.parametrize("mode", LOSS_REDUCTIONS)
def test_all_masked_batch_gives_zero_not_nan(mode):
    values = torch.tensor([[float("nan"), 1.0]], requires_grad=True)
    loss = aggregate_loss(values, torch.zeros(1, 2), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(values.grad == 0)


def test_unknown_mode_lists_the_choices():
    with pytest.raises(
        ValueError, match="token_mean, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm"
    ):
        aggregate_loss(VALUES, MASK, "mean")


def test_shape_mismatch_and_bad_counts_are_rejected():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate_loss(VALUES, MASK[:, :2], "token_mean")
    with pytest.raises(ValueError, match="num_tokens"):
        LossNormalizer(num_tokens=-1, num_sequences=1, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        LossNormalizer(num_tokens=1, num_sequences=1, max_len=0)


def test_masked_mean_and_whiten():
    # Policy values [1, 2, 3, 4]: mean 2.5, unbiased std sqrt(5/3) = 1.290994
    # -> whitened [-1.161895, -0.387298, 0.387298, 1.161895]; masked positions stay 0.
    assert masked_mean(VALUES, MASK).item() == pytest.approx(2.5)
    whitened = masked_whiten(VALUES, MASK)
    expected = torch.tensor([[-1.161895, -0.387298, 0.387298], [1.161895, 0, 0], [0, 0, 0]])
    torch.testing.assert_close(whitened, expected, atol=1e-5, rtol=0)


@st.composite
def split_batches(draw):
    batch, length = draw(st.integers(1, 8)), draw(st.integers(1, 6))
    size = batch * length
    values = draw(st.lists(st.floats(-100, 100, allow_nan=False), min_size=size, max_size=size))
    mask = draw(st.lists(st.integers(0, 1), min_size=size, max_size=size))
    cuts = sorted(draw(st.lists(st.integers(0, batch), max_size=3)))
    return (
        torch.tensor(values, dtype=torch.float64).view(batch, length),
        torch.tensor(mask).view(batch, length),
        [0, *cuts, batch],
    )


@pytest.mark.parametrize("mode", LOSS_REDUCTIONS)
@settings(max_examples=50, deadline=None)
@given(batch=split_batches(), max_len=st.sampled_from([None, 16]))
def test_micro_batch_losses_add_up_to_the_full_batch_loss(mode, batch, max_len):
    values, mask, bounds = batch
    normalizer = LossNormalizer.from_mask(mask, max_len=max_len)
    full = aggregate_loss(values, mask, mode, normalizer)
    micro_sum = sum(
        aggregate_loss(values[start:end], mask[start:end], mode, normalizer)
        for start, end in zip(bounds, bounds[1:])
    )
    torch.testing.assert_close(micro_sum, full)
    # And with no normalizer the full batch uses its own counts.
    if max_len is None:
        torch.testing.assert_close(aggregate_loss(values, mask, mode), full)
