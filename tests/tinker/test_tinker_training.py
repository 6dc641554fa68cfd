"""The training host behind tinker-serve, in process: micro-batched and prefix-sharing forward_backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("peft", reason="the tinker extra is not installed: pip install 'aloft[tinker]'")
from aloft.tinker import batching
from aloft.tinker.errors import TinkerUserError
from aloft.tinker.training import AdamParams, LoraSpec, TrainingHost
from aloft.tinker.wire import Datum

CLIENT = "s:train:0"


def rl_datum(tokens: list[int], advantage: float, mask: bool = True) -> Datum:
    """Tinker's alignment: input tokens[:-1], targets tokens[1:] (with a 0 target on the first two
    positions, as the cookbook's RL loop writes its prompt positions)."""
    n = len(tokens) - 1
    targets = np.array(tokens[1:])
    targets[:2] = 0
    return Datum(
        tokens=tokens[:-1],
        inputs={
            "target_tokens": targets,
            "logprobs": np.full(n, -2.0, dtype=np.float32),
            "advantages": np.full(n, advantage, dtype=np.float32),
            "sequence_ratio_mask": np.full(n, 1.0 if mask else 0.0, dtype=np.float32),
        },
    )


def group_batch() -> list[Datum]:
    """Two groups of three samples: a 20-token prompt each (the first 12 tokens common to both),
    then replies of 3 to 9 tokens."""
    common = list(range(3, 15))
    prompts = [common + [20, 21, 22, 23, 24, 25, 26, 27], common + [30, 31, 32, 33, 34, 35, 36, 37]]
    replies = [[40, 41, 42], [43, 44, 45, 46, 47, 48, 49, 50, 51], [52, 53, 54, 55, 56]]
    return [
        rl_datum(prompt + reply, adv) for prompt in prompts for reply, adv in zip(replies, [1.0, -0.5, 2.0])
    ]


@pytest.fixture(scope="module")
def host(tiny_model_dir):
    host = TrainingHost(tiny_model_dir, max_length=64)
    host.create(CLIENT, LoraSpec(rank=4, seed=0))
    return host


def take_gradients(host: TrainingHost) -> list[torch.Tensor]:
    state = host.client(CLIENT)
    grads = [p.grad.clone() for p in state.parameters if p.grad is not None]
    state.optimizer.zero_grad(set_to_none=True)
    return grads


def test_plan_shares_each_run_s_common_prefix_within_the_token_budget(monkeypatch):
    data = group_batch()
    # Unlimited: a run per group, sharing its 20-token prompt (20 + 3 x 8 = 44 tokens). Taking the
    # next group's first sample in would cut the shared prefix to the 12 common tokens and cost
    # 12 + 4 x 16 = 76 tokens, more than a run of its own (44 + 22 = 66).
    monkeypatch.setattr(batching, "MICRO_BATCH_TOKENS", 10_000)
    monkeypatch.setattr(batching, "MIN_SHARED_PREFIX", 4)
    assert [(len(rows), prefix) for rows, prefix in batching.plan(data)] == [(3, 20), (3, 20)]
    # 40 tokens a forward (rows of 22, 28 and 24 tokens a group): a whole group would be 20 + 3 x 8 =
    # 44, so the first two samples share their 20-token prompt (36), the third goes with the next
    # group's first on the 12 common tokens (12 + 2 x 12 = 36), the last two share their prompt.
    monkeypatch.setattr(batching, "MICRO_BATCH_TOKENS", 40)
    assert [(len(rows), prefix) for rows, prefix in batching.plan(data)] == [(2, 20), (2, 12), (2, 20)]
    # A prefix under MIN_SHARED_PREFIX is not worth its own forward.
    monkeypatch.setattr(batching, "MIN_SHARED_PREFIX", 21)
    assert all(prefix == 0 for _, prefix in batching.plan(data))


@pytest.mark.parametrize("budget,min_prefix", [(10_000, 4), (40, 4), (11, 4), (10_000, 1_000)])
def test_every_plan_gives_the_whole_call_s_loss_logprobs_and_gradient(host, monkeypatch, budget, min_prefix):
    """One padded forward of all six datums is the reference; shared prefixes and micro-batches
    must give the same loss, per-datum logprobs and gradient up to float rounding."""
    data = group_batch()
    monkeypatch.setattr(batching, "MICRO_BATCH_TOKENS", 10_000)
    monkeypatch.setattr(batching, "MIN_SHARED_PREFIX", 1_000)
    reference_outputs, reference = host.forward_backward(CLIENT, data, "ppo", {}, forward_only=False)
    reference_grads = take_gradients(host)
    monkeypatch.setattr(batching, "MICRO_BATCH_TOKENS", budget)
    monkeypatch.setattr(batching, "MIN_SHARED_PREFIX", min_prefix)
    outputs, result = host.forward_backward(CLIENT, data, "ppo", {}, forward_only=False)
    assert result["loss:sum"] == pytest.approx(reference["loss:sum"], abs=1e-5)
    for got, want in zip(outputs, reference_outputs, strict=True):
        np.testing.assert_allclose(got["logprobs"], want["logprobs"], atol=1e-5)
    for got, want in zip(take_gradients(host), reference_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_a_call_refused_in_a_later_micro_batch_adds_no_gradient(host, monkeypatch):
    monkeypatch.setattr(batching, "MICRO_BATCH_TOKENS", 8)
    host.forward_backward(CLIENT, [rl_datum([3, 4, 5, 6], 1.0)], "gspo", {}, forward_only=False)
    state = host.client(CLIENT)
    before = [p.grad.clone() for p in state.parameters if p.grad is not None]
    # The first datum's forward and backward run before gspo refuses the second (no ratio mask).
    bad = [rl_datum([3, 4, 5, 6, 7], 1.0), rl_datum([5, 6, 7, 8], 1.0, mask=False)]
    with pytest.raises(TinkerUserError, match="sequence_ratio_mask"):
        host.forward_backward(CLIENT, bad, "gspo", {}, forward_only=False)
    after = [p.grad for p in state.parameters if p.grad is not None]
    assert len(after) == len(before) and all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    take_gradients(host)


def test_save_state_refuses_pending_gradients_before_writing_anything(host, tmp_path):
    """In process, as the server calls it: refused while a forward_backward waits for optim_step
    (a forward alone adds nothing to wait for), allowed after the step."""
    client = "s:train:save"
    host.create(client, LoraSpec(rank=4, seed=0))
    try:
        host.forward_backward(client, [rl_datum([3, 4, 5, 6], 1.0)], "ppo", {}, forward_only=False)
        host.forward_backward(client, [rl_datum([3, 4, 5, 7], 1.0)], "ppo", {}, forward_only=False)
        with pytest.raises(TinkerUserError, match="from 2 forward_backward calls waiting for optim_step"):
            host.save_state(client, tmp_path)
        assert not any(tmp_path.iterdir())
        host.optim_step(client, AdamParams())
        host.forward_backward(client, [rl_datum([3, 4, 5, 6], 1.0)], "ppo", {}, forward_only=True)
        host.save_state(client, tmp_path)
        assert {path.name for path in tmp_path.iterdir()} == {
            "adapter.safetensors",
            "optimizer.pt",
            "state.json",
        }
    finally:
        host.remove(client)
