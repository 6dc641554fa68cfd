"""Per-row sampling: truncation rules, reported logprobs, per-row reproducibility."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aloft.inference.sampling import _inverse_cdf, apply_top_k, apply_top_p, sample_next_tokens


def _params(rows: int, temperature: float, top_k: int = 0, top_p: float = 1.0):
    return (
        torch.full((rows,), temperature),
        torch.full((rows,), top_k, dtype=torch.long),
        torch.full((rows,), top_p),
    )


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    # Sorted: 0.5, 0.3, 0.15, 0.05. Mass of likelier tokens: 0, 0.5, 0.8, 0.95.
    # top_p = 0.7 keeps tokens whose likelier mass is < 0.7: 0.5 and 0.3.
    kept = apply_top_p(probs, torch.tensor([0.7]))
    assert torch.equal(kept, torch.tensor([[0.0, 0.5, 0.0, 0.3]]))
    # top_p = 0.5 keeps only the 0.5 token (the 0.3 one already has 0.5 of mass before it).
    assert torch.equal(apply_top_p(probs, torch.tensor([0.5])), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))
    assert torch.equal(apply_top_p(probs, torch.tensor([1.0])), probs)


def test_top_k_keeps_k_largest_per_row_and_zero_disables():
    probs = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.1, 0.4, 0.2, 0.3], [0.1, 0.4, 0.2, 0.3]])
    kept = apply_top_k(probs, torch.tensor([2, 0, -1]))
    assert torch.equal(kept[0], torch.tensor([0.0, 0.4, 0.0, 0.3]))
    assert torch.equal(kept[1], probs[1])
    assert torch.equal(kept[2], probs[2])


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-8, 8, allow_nan=False), min_size=2, max_size=40),
    top_k=st.integers(0, 45),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.05, 3.0),
    seed=st.integers(0, 2**31),
)
def test_sampled_token_survives_truncation_and_logprob_is_untruncated(
    logits, top_k, top_p, temperature, seed
):
    row = torch.tensor([logits])
    temps, ks, ps = _params(1, temperature, top_k, top_p)
    tokens, logprobs = sample_next_tokens(row, temps, ks, ps, [torch.Generator().manual_seed(seed)])
    probs = torch.softmax(row / temperature, -1)
    allowed = apply_top_p(apply_top_k(probs, ks), ps)
    # Kept: at least as likely as the least likely token the truncation keeps. (Among tied
    # probabilities either one may be the one kept: logits [-1e-7, 0, 0] with top_p=0.5 keep one
    # of the two zeros, and which one depends on the sort.)
    assert probs[0, tokens[0]] >= allowed[allowed > 0].min() * (1 - 1e-6)
    expected = torch.log_softmax(row / temperature, -1)[0, tokens[0]]
    assert math.isclose(logprobs[0].item(), expected.item(), rel_tol=1e-5, abs_tol=1e-6)


def test_greedy_rows_take_argmax_and_report_temperature_one_logprob():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    tokens, logprobs = sample_next_tokens(logits, *_params(1, 0.0), [torch.Generator()])
    assert tokens.tolist() == [1]
    # log_softmax([1, 3, 2])[1] = 3 - log(e^1 + e^3 + e^2) = -0.40760596
    assert math.isclose(logprobs.item(), -0.40760596, abs_tol=1e-6)


def test_logprob_uses_temperature_scaled_distribution():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    # At T = 0.5 the logits become [0, 2 log 3]: probabilities 1/10 and 9/10.
    tokens, logprobs = sample_next_tokens(logits, *_params(1, 0.5, top_k=1), [torch.Generator()])
    assert tokens.tolist() == [1]  # top-k 1 leaves only the likelier token
    assert math.isclose(logprobs.item(), math.log(0.9), abs_tol=1e-6)


def test_sampling_frequencies_follow_the_distribution():
    logits = torch.log(torch.tensor([[0.25, 0.75]]))
    generator = torch.Generator().manual_seed(0)
    draws = [sample_next_tokens(logits, *_params(1, 1.0), [generator])[0].item() for _ in range(2000)]
    # Binomial(2000, 0.75): mean 1500, std ~19.4; +-80 is ~4 std.
    assert abs(sum(draws) - 1500) < 80


def test_a_rows_draws_do_not_depend_on_other_rows():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    temps, ks, ps = _params(4, 0.9, top_p=0.95)
    batch_generators = [torch.Generator().manual_seed(s) for s in (1, 2, 3, 4)]
    alone_generator = torch.Generator().manual_seed(3)
    for _ in range(20):
        together = sample_next_tokens(logits, temps, ks, ps, batch_generators)[0]
        alone = sample_next_tokens(logits[2:3], temps[:1], ks[:1], ps[:1], [alone_generator])[0]
        assert together[2] == alone[0]


def _full_inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One cumulative sum over the whole vocabulary (the sampler's definition, in float64)."""
    cdf = probs.double().cumsum(dim=-1)
    return torch.searchsorted(cdf, (uniforms.double() * cdf[:, -1])[:, None], right=True).squeeze(1)


@pytest.mark.parametrize("vocab", [49_152, 151_936, 997, 1_536])
def test_blockwise_inverse_cdf_picks_what_one_cumulative_sum_over_the_vocabulary_picks(vocab):
    """SmolLM2's and Qwen's vocabularies (blocks of 512 and 128), a prime one (blocks of 1)."""
    generator = torch.Generator().manual_seed(vocab)
    probs = torch.softmax(torch.randn(8, vocab, generator=generator) * 4, dim=-1)
    uniforms = torch.rand(8, 250, generator=generator)
    picks = torch.stack([_inverse_cdf(probs, uniforms[:, i]) for i in range(250)], dim=1)
    expected = torch.stack([_full_inverse_cdf(probs, uniforms[:, i]) for i in range(250)], dim=1)
    # Equal but where a target falls within float32 rounding of a boundary (about 1e-7 of draws).
    assert (picks == expected).float().mean() >= 0.999


def test_blockwise_inverse_cdf_never_picks_a_zero():
    """Most tokens zeroed (whole blocks of them, as top-k leaves), targets at both ends of [0, 1)."""
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(4, 49_152, generator=generator)
    probs[probs < 0.9995] = 0.0  # ~25 tokens a row survive
    probs[:, :512] = 0.0
    uniforms = torch.tensor([0.0, 1e-9, 0.5, 1 - 2**-24])
    for u in uniforms:
        picks = _inverse_cdf(probs, u.repeat(4))
        assert (probs.gather(1, picks[:, None]) > 0).all()


def test_a_rows_token_and_logprob_are_bit_identical_alone_and_in_a_batch_of_32():
    """Identical requests get identical logprobs in any batch: at a real vocabulary size, where torch
    splits reductions over a whole batch across threads differently for 1 row and for 32."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(32, 49_152, generator=generator) * 3
    temps, ks, ps = _params(32, 0.7)
    together = sample_next_tokens(
        logits, temps, ks, ps, [torch.Generator().manual_seed(s) for s in range(32)]
    )
    for row in range(32):
        alone = sample_next_tokens(
            logits[row : row + 1], temps[:1], ks[:1], ps[:1], [torch.Generator().manual_seed(row)]
        )
        assert together[0][row] == alone[0][0]
        assert torch.equal(together[1][row], alone[1][0]), (row, together[1][row] - alone[1][0])
