"""How far a step's update moved the policy: policy/update_kl and policy/update_rel_norm, checked
against a direct computation on the same weights, and the on-policy metrics fixed by construction."""

from __future__ import annotations

import math

import pytest
import torch

from aloft.config import load_config
from aloft.trainer import Trainer
from aloft.trainer.update_size import probe_rows, update_kl
from aloft.types import TrajectoryGroup
from tests.trainer.test_mini_batches import _trajectory
from tests.trainer.test_trainer import BASE


def test_probe_rows_spread_over_the_batch():
    assert probe_rows(16, 4) == [0, 5, 10, 15]
    assert probe_rows(3, 8) == [0, 1, 2]
    assert probe_rows(10, 1) == [0]


def test_update_kl_is_the_k3_estimate_over_policy_tokens():
    before = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert update_kl(before, before, mask) == 0.0
    after = before + torch.tensor([[0.1, -0.2, 5.0], [0.3, 9.0, 9.0]])  # masked changes do not count
    expected = sum(math.expm1(d) - d for d in (0.1, -0.2, 0.3)) / 3
    assert update_kl(before, after, mask) == pytest.approx(expected, rel=1e-6)  # float32 inputs
    assert update_kl(before, after, torch.zeros_like(mask)) == 0.0
    # Padding no forward computed holds NaN (a short row's micro-batch is narrower than the batch).
    padded = before.masked_fill(mask == 0, float("nan"))
    assert update_kl(padded, after, mask) == pytest.approx(expected, rel=1e-6)


def groups(count: int) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(group_id=f"g{g}", trajectories=[_trajectory(g, s) for s in range(2)])
        for g in range(count)
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model.lora_rank=4", "model.lora_target_modules=[q_proj,v_proj]"],
        ["algorithm.mini_batches=2"],
        # rows of different lengths in micro-batches of their own width (NaN padding between them)
        ["optim.packing=true", "optim.micro_batch_tokens=12"],
    ],
    ids=["full", "lora", "two-mini-batches", "narrow-micro-batches"],
)
def test_the_update_metrics_equal_a_direct_measurement(tiny_overrides, overrides):
    """One update on fixed groups: update_rel_norm is ||after - before|| / ||before|| over the trained
    weights, update_kl the k3 KL between the probe rows' logprobs before and after, both > 0; on-policy
    the ratio metrics (0, 0, 1 by construction) are left out, with two mini-batches they are kept."""
    cfg = load_config(
        None,
        [
            *BASE,
            *tiny_overrides,
            "generator.n_samples=2",
            "trainer.update_kl_rows=3",
            "optim.lr=1e-2",
            *overrides,
        ],
    )
    trainer = Trainer(cfg)
    policy = trainer.c.policy
    trained = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    steps = groups(4)
    from aloft.training import collate

    batch = collate(
        [t for g in steps for t in g.trajectories], trainer.c.pad_token_id, {f"g{g}": g for g in range(4)}
    )
    rows = probe_rows(batch.num_rows, 3)
    probe = batch.select(rows)
    before = policy.compute_logprobs(probe)

    metrics = trainer.train_on(steps, step=1)

    after = {n: p.detach() for n, p in policy.model.named_parameters() if p.requires_grad}
    delta = math.sqrt(sum(float((after[n] - trained[n]).square().sum()) for n in trained))
    norm = math.sqrt(sum(float(t.square().sum()) for t in trained.values()))
    assert metrics["policy/update_rel_norm"] == pytest.approx(delta / norm, rel=1e-5)
    assert metrics["policy/update_rel_norm"] > 0
    expected_kl = update_kl(before, policy.compute_logprobs(probe), probe.loss_mask)
    assert metrics["policy/update_kl"] == pytest.approx(expected_kl, rel=1e-3, abs=1e-9)
    assert metrics["policy/update_kl"] > 0
    on_policy = "algorithm.mini_batches=2" not in overrides
    for name in ("policy/approx_kl", "policy/clip_frac", "policy/ratio_mean"):
        assert (name in metrics) is not on_policy, name


def test_the_update_metrics_can_be_turned_off(tiny_overrides):
    cfg = load_config(
        None, [*BASE, *tiny_overrides, "trainer.update_kl_rows=0", "trainer.update_rel_norm=false"]
    )
    metrics = Trainer(cfg).train_on(groups(2), step=1)
    assert "policy/update_kl" not in metrics and "policy/update_rel_norm" not in metrics
