"""Token logprobs and entropies from logits."""

from __future__ import annotations

import math

import pytest
import torch

from aloft.algorithms import entropy_from_logits, logprobs_and_entropy_from_logits, logprobs_from_logits

# Logits [0, ln 3] -> probs [1/4, 3/4]: logprobs [ln 0.25, ln 0.75] = [-1.386294, -0.287682];
# entropy -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335.
TWO_WAY = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])


def test_logprobs_by_hand():
    logprobs = logprobs_from_logits(TWO_WAY, torch.tensor([[0, 1]]))
    torch.testing.assert_close(logprobs, torch.tensor([[-1.386294, -0.287682]]))


def test_entropy_by_hand_and_of_a_uniform_distribution():
    torch.testing.assert_close(entropy_from_logits(TWO_WAY), torch.tensor([[0.562335, 0.562335]]))
    # Uniform over V = 7 tokens: entropy ln 7.
    torch.testing.assert_close(entropy_from_logits(torch.zeros(2, 3, 7)), torch.full((2, 3), math.log(7)))


def test_temperature_divides_the_logits():
    # Logits [0, 2 ln 3] at temperature 2 are [0, ln 3]: the same numbers as above.
    doubled = TWO_WAY * 2
    torch.testing.assert_close(
        logprobs_from_logits(doubled, torch.tensor([[0, 1]]), temperature=2.0),
        torch.tensor([[-1.386294, -0.287682]]),
    )
    torch.testing.assert_close(entropy_from_logits(doubled, temperature=2.0), entropy_from_logits(TWO_WAY))
    # Temperature 0 (greedy) is reported under temperature 1, like the engines' sampler logprobs.
    torch.testing.assert_close(
        logprobs_from_logits(doubled, torch.tensor([[0, 1]]), temperature=0.0),
        logprobs_from_logits(doubled, torch.tensor([[0, 1]])),
    )
    with pytest.raises(ValueError, match="temperature"):
        logprobs_from_logits(doubled, torch.tensor([[0, 1]]), temperature=-1.0)


def test_matches_log_softmax_and_is_differentiable():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=generator, requires_grad=True)
    ids = torch.randint(0, 11, (3, 4), generator=generator)
    logprobs = logprobs_from_logits(logits, ids)
    reference = torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logprobs, reference)
    (grad,) = torch.autograd.grad(logprobs.sum(), logits)
    (reference_grad,) = torch.autograd.grad(reference.sum(), logits)
    torch.testing.assert_close(grad, reference_grad)
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(entropy_from_logits(logits), -(probs * probs.log()).sum(-1))


def test_bf16_logits_are_computed_in_float32():
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 5, 13, generator=generator) * 4).bfloat16().requires_grad_()
    ids = torch.randint(0, 13, (2, 5), generator=generator)
    logprobs = logprobs_from_logits(logits, ids)
    entropy = entropy_from_logits(logits)
    assert logprobs.dtype == torch.float32 and entropy.dtype == torch.float32
    upcast = logits.detach().float()
    reference = torch.log_softmax(upcast, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logprobs, reference, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, entropy_from_logits(upcast), atol=1e-5, rtol=0)
    logprobs.sum().backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16


def test_shape_errors():
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        logprobs_from_logits(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        entropy_from_logits(torch.zeros(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_and_entropy_in_one_pass_match_the_separate_functions(dtype):
    generator = torch.Generator().manual_seed(2)
    base = (torch.randn(3, 5, 17, generator=generator) * 3).to(dtype)
    ids = torch.randint(0, 17, (3, 5), generator=generator)
    weights = torch.randn(3, 5, generator=generator)
    for temperature in (1.0, 0.7):
        separate = base.clone().requires_grad_()
        logprobs = logprobs_from_logits(separate, ids, temperature=temperature)
        entropy = entropy_from_logits(separate.detach(), temperature=temperature)
        (logprobs * weights).sum().backward()
        fused = base.clone().requires_grad_()
        fused_logprobs, fused_entropy = logprobs_and_entropy_from_logits(
            fused, ids, temperature=temperature, entropy_grad=False
        )
        assert not fused_entropy.requires_grad
        (fused_logprobs * weights).sum().backward()
        # A fused softmax (entropy as a metric): the same values up to float32 rounding.
        torch.testing.assert_close(fused_logprobs, logprobs, atol=2e-6, rtol=1e-6)
        torch.testing.assert_close(fused.grad, separate.grad, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(fused_entropy, entropy, atol=1e-5, rtol=1e-5)
    # entropy_grad=True: the entropy is differentiable like entropy_from_logits
    logits = base.float().requires_grad_()
    _, entropy = logprobs_and_entropy_from_logits(logits, ids)
    (reference,) = torch.autograd.grad(entropy_from_logits(logits).sum(), logits)
    (grad,) = torch.autograd.grad(entropy.sum(), logits)
    torch.testing.assert_close(grad, reference, atol=1e-5, rtol=1e-4)
    empty = logprobs_and_entropy_from_logits(base[:0], ids[:0])
    assert empty[0].shape == empty[1].shape == (0, 5)


def test_bf16_rows_get_their_own_gradients():
    """Half-precision rows are split with one ``unbind`` (a backward over per-row ``logits[i]``
    selects cost O(B^2 T V)); each row's gradient still lands in that row only."""
    logits = torch.randn(4, 3, 11).bfloat16().requires_grad_()
    ids = torch.randint(0, 11, (4, 3))
    logprobs_from_logits(logits, ids)[1].sum().backward()
    assert logits.grad[[0, 2, 3]].abs().sum() == 0 and logits.grad[1].abs().sum() > 0
