"""Training forward passes: batch layout, prompt sharing, micro-batch invariance."""

from __future__ import annotations

import torch

from aloft.models import load_model
from aloft.training import collate
from aloft.training.workers import completion_logits
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
