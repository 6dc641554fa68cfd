"""Training forward passes: batch layout, prompt sharing, micro-batch invariance."""

from __future__ import annotations

import torch

from aloft.models import load_model
from aloft.training import collate
from aloft.training.forward import completion_logits
from aloft.types import RolloutStatus, Trajectory


def trajectories(groups: int = 3, n: int = 4, seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        prompt = torch.randint(3, 300, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n):
            length = int(torch.randint(1, 7, (1,), generator=g))
            ids = torch.randint(3, 300, (length,), generator=g).tolist()
            mask = [1] * length
            if length > 3:  # an env observation in the middle
                mask[1:3] = [0, 0]
            out.append(
                Trajectory(
                    prompt_ids=prompt,
                    completion_ids=ids,
                    loss_mask=mask,
                    sampler_logprobs=[0.0] * length,
                    rewards=[0.0] * length,
                    status=RolloutStatus.STOP,
                    group_id=f"g{k}",
                )
            )
    return out


def test_collate_layout():
    trajs = trajectories()
    batch = collate(trajs, pad_token_id=0, group_index={f"g{k}": k for k in range(3)})
    for i, t in enumerate(trajs):
        row = batch.input_ids[i][batch.attention_mask[i].bool()].tolist()
        assert row == t.prompt_ids + t.completion_ids
        assert batch.completion_ids[i, : len(t.completion_ids)].tolist() == t.completion_ids
        assert batch.loss_mask[i].tolist()[: len(t.loss_mask)] == t.loss_mask
        assert batch.loss_mask[i, len(t.loss_mask) :].sum() == 0
    sub = batch.select([4, 5])  # group 1 only: padding columns nobody needs are trimmed
    assert sub.prompt_width == len(trajs[4].prompt_ids)
    assert sub.completion_width == max(len(trajs[4].completion_ids), len(trajs[5].completion_ids))


def test_shared_prompt_forward_equals_plain_forward(tiny_model_dir):
    """Logits and parameter gradients match the plain forward (prompts computed once per group)."""
    model = load_model(tiny_model_dir).train()
    batch = collate(trajectories(), pad_token_id=0, group_index={f"g{k}": k for k in range(3)})
    weights = torch.randn(batch.completion_ids.shape + (model.config.vocab_size,))
    grads = []
    logits_seen = []
    for share in (False, True):
        model.zero_grad()
        logits = completion_logits(model, batch, share_prompts=share)
        logits_seen.append(logits.detach())
        ((logits * weights).sum(-1) * batch.loss_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert logits_seen[0].shape == logits_seen[1].shape
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(logits_seen[1][mask], logits_seen[0][mask], atol=1e-4, rtol=1e-4)
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-3, rtol=1e-3, msg=name)


def test_short_rows_under_bf16_autocast_use_eager_attention_and_match_sdpa(tiny_model_dir, monkeypatch):
    """On CPU under bf16 autocast, short rows run eager attention (SDPA's bf16 flash backward is slow
    there); the model's setting is restored, and logits and gradients agree with SDPA's."""
    from aloft.training import forward

    model = load_model(tiny_model_dir).train()
    batch = collate(trajectories(), pad_token_id=0, group_index={f"g{k}": k for k in range(3)})
    seen: list[str] = []
    original = model.set_attn_implementation

    def spy(name: str) -> None:
        seen.append(name)
        original(name)

    monkeypatch.setattr(model, "set_attn_implementation", spy)
    results = []
    for max_width in (forward.EAGER_ATTENTION_MAX_WIDTH, 0):  # eager, then SDPA
        monkeypatch.setattr(forward, "EAGER_ATTENTION_MAX_WIDTH", max_width)
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = completion_logits(model, batch, share_prompts=True)
        logits.float().logsumexp(-1).mul(batch.loss_mask).sum().backward()
        results.append((logits.detach().float(), [p.grad.clone() for p in model.parameters()]))
        assert model.config._attn_implementation == "sdpa"
    assert seen == ["eager", "sdpa"]  # swapped once for the first call only
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(results[0][0][mask], results[1][0][mask], atol=0.1, rtol=0.02)
    for eager_grad, sdpa_grad in zip(results[0][1], results[1][1]):
        assert (eager_grad - sdpa_grad).norm() <= 0.05 * sdpa_grad.norm() + 1e-6


def test_named_weights_cover_the_state_dict_once_per_tensor(tiny_model_dir):
    from aloft.training import PolicyWorker
    from aloft.training.workers import OptimSettings

    policy = PolicyWorker(tiny_model_dir, OptimSettings(lr=1e-3))
    state = policy.model.state_dict()
    named = dict(policy.named_weights())
    assert set(named) <= set(state)
    ptrs = [t.data_ptr() for t in named.values()]
    assert len(ptrs) == len(set(ptrs))
    assert {t.data_ptr() for t in state.values()} == set(ptrs)
