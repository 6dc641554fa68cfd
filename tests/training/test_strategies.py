"""Training strategies: FSDP2 over 2 gloo ranks gives the single-process loss, gradients and update."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from aloft.config.schema import AlgorithmConfig
from aloft.distributed import free_loopback_port, init_loopback_group, leave_spawned_rank
from aloft.training.batch import collate
from aloft.training.strategies import FSDP2, DeepSpeedZeRO, balance_micro_batches
from aloft.training.workers import OptimSettings, PolicyWorker
from aloft.types import RolloutStatus, Trajectory

ROWS = 7  # odd: one rank gets fewer real micro-batches and runs a filler pass


def test_balance_micro_batches_evens_tokens_and_counts():
    assert balance_micro_batches([10, 10, 10, 10], 2) == [[0, 2], [1, 3]]
    per_rank = balance_micro_batches([50, 5, 5, 5, 40], 2)
    assert sorted(i for r in per_rank for i in r) == [0, 1, 2, 3, 4]
    assert sorted(len(r) for r in per_rank) == [2, 3]
    assert sum([50, 5, 5, 5, 40][i] for i in per_rank[0]) <= 60  # the two long ones are apart
    assert balance_micro_batches([3], 2) == [[0], []]


def make_batch(vocab: int):
    rng = random.Random(0)
    trajectories = []
    for i in range(ROWS):
        n = rng.randint(1, 16)
        trajectories.append(
            Trajectory(
                prompt_ids=[rng.randrange(3, vocab) for _ in range(rng.randint(2, 9))],
                completion_ids=[rng.randrange(3, vocab) for _ in range(n)],
                loss_mask=[1] * n,
                sampler_logprobs=[-2.0] * n,
                rewards=[0.0] * n,
                status=RolloutStatus.STOP,
                group_id=str(i % 2),
            )
        )
    batch = collate(trajectories, 0, {"0": 0, "1": 1})
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(1))
    return batch, advantages


def update_on_fixed_batch(worker: PolicyWorker, algo: AlgorithmConfig | None = None) -> dict[str, float]:
    """One policy update on ``make_batch``'s rows as a single mini-batch; returns its metrics."""
    batch, advantages = make_batch(worker.model.config.vocab_size)
    return worker.update(
        batch,
        advantages,
        algo or AlgorithmConfig(),
        old_logprobs=None,
        ref_logprobs=None,
        mini_batches=[list(range(ROWS))],
        max_len=batch.completion_width,
    )


def train_once(
    worker: PolicyWorker, algo: AlgorithmConfig | None = None
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One update on the fixed batch; returns its metrics and the gradients the optimizer saw (in full)."""
    grads: dict[str, torch.Tensor] = {}
    step = worker._step

    def capturing_step() -> float:
        for name, parameter in worker.model.named_parameters():
            grad = parameter.grad
            grads[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
        return step()

    worker._step = capturing_step
    metrics = update_on_fixed_batch(worker, algo)
    return metrics, grads


@pytest.mark.parametrize("reduction", ["seq_mean_token_sum", "seq_mean_token_mean", "token_mean"])
def test_a_loss_reduction_gives_the_same_update_with_and_without_micro_batching(tiny_model_dir, reduction):
    """Issue 23's seq_mean_token_sum (and the others): one row per micro-batch equals the whole
    mini-batch at once, and on-policy PPO's loss is the hand-derived -sum(A) / sequences."""
    algo = AlgorithmConfig(loss_reduction=reduction)
    runs = {}
    for micro in (1, ROWS):
        torch.manual_seed(0)
        worker = PolicyWorker(
            tiny_model_dir, OptimSettings(lr=1e-3, micro_batch_size=micro, share_prompts=False)
        )
        runs[micro] = train_once(worker, algo)
    (one_metrics, one_grads), (all_metrics, all_grads) = runs[1], runs[ROWS]
    for name, grad in all_grads.items():
        # fp32 sums in another order: the error scales with the summed terms, not with the result, so
        # an element of a tied embedding's gradient that cancels to near 0 still carries the rounding
        # of the large terms (2.3e-6 on an AMX Xeon); a wrong reduction is off by the gradient itself.
        scale = float(grad.abs().max())
        assert torch.allclose(one_grads[name], grad, rtol=1e-4, atol=max(1e-6, 1e-4 * scale)), name
    batch, advantages = make_batch(worker.model.config.vocab_size)
    mask = batch.loss_mask
    # At ratio 1 the clipped PPO token loss is -A: reduce it by hand.
    expected = {
        "seq_mean_token_sum": -(advantages * mask).sum() / ROWS,
        "seq_mean_token_mean": -((advantages * mask).sum(-1) / mask.sum(-1)).sum() / ROWS,
        "token_mean": -(advantages * mask).sum() / mask.sum(),
    }[reduction]
    for metrics in (one_metrics, all_metrics):
        assert metrics["policy/loss"] == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(("count_masked_rows", "sequences"), [(False, ROWS - 2), (True, ROWS)])
def test_seq_mean_counts_masked_rows_reaches_the_update(tiny_model_dir, count_masked_rows, sequences):
    """Two rows without policy tokens (as after a filter): on-policy PPO's seq_mean_token_sum loss is
    -sum(A) over the other rows, divided by those rows (aloft, verl) or by all rows (skyrl-train)."""
    worker = PolicyWorker(tiny_model_dir, OptimSettings(lr=1e-3, micro_batch_size=2, share_prompts=False))
    batch, advantages = make_batch(worker.model.config.vocab_size)
    batch.loss_mask[:2] = 0
    algo = AlgorithmConfig(loss_reduction="seq_mean_token_sum", seq_mean_counts_masked_rows=count_masked_rows)
    metrics = worker.update(
        batch,
        advantages,
        algo,
        old_logprobs=None,
        ref_logprobs=None,
        mini_batches=[list(range(ROWS))],
        max_len=batch.completion_width,
    )
    expected = -(advantages * batch.loss_mask).sum() / sequences
    assert metrics["policy/loss"] == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(("kl_clamp", "clamped"), [(None, False), (10.0, True)])
def test_kl_clamp_reaches_the_kl_loss(tiny_model_dir, kl_clamp, clamped):
    """A reference that gives every token logprob 0: on the random tiny model (logprobs near -log V,
    about -5.5) each token's k3 is e^5.5 - 6.5 > 200, so with the peers' clamp the KL loss is exactly
    10 and without it far above."""
    worker = PolicyWorker(tiny_model_dir, OptimSettings(lr=1e-3, micro_batch_size=2, share_prompts=False))
    batch, advantages = make_batch(worker.model.config.vocab_size)
    algo = AlgorithmConfig(kl_coef=0.1, kl_clamp=kl_clamp)
    ref_logprobs = torch.zeros(batch.loss_mask.shape)
    metrics = worker.update(
        batch,
        advantages,
        algo,
        old_logprobs=None,
        ref_logprobs=ref_logprobs,
        mini_batches=[list(range(ROWS))],
        max_len=batch.completion_width,
    )
    if clamped:
        assert metrics["policy/kl_loss"] == pytest.approx(10.0, rel=1e-6)
    else:
        assert metrics["policy/kl_loss"] > 100.0


def settings() -> OptimSettings:
    return OptimSettings(lr=1e-3, micro_batch_size=2, share_prompts=False)


def _fsdp_rank(rank: int, port: int, model_dir: str, out: str) -> None:
    init_loopback_group(rank, 2, port)
    try:
        worker = PolicyWorker(model_dir, settings(), strategy=FSDP2())
        metrics, grads = train_once(worker)
        weights = dict(worker.named_weights())  # a collective: full weights on every rank
        if rank == 0:
            torch.save({"metrics": metrics, "grads": grads, "weights": weights}, out)
    finally:
        dist.destroy_process_group()


def test_fsdp2_two_ranks_equal_the_single_process_update(tiny_model_dir, tmp_path):
    out = tmp_path / "fsdp.pt"
    mp.spawn(_fsdp_rank, args=(free_loopback_port(), tiny_model_dir, str(out)), nprocs=2)
    fsdp = torch.load(out)
    single = PolicyWorker(tiny_model_dir, settings())
    metrics, grads = train_once(single)
    assert fsdp["grads"].keys() == grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(fsdp["grads"][name], grad, rtol=1e-4, atol=1e-7), name
    for key in ("policy/loss", "policy/grad_norm", "policy/entropy", "logprob/sampler_abs_diff"):
        assert fsdp["metrics"][key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), key
    for name, weight in single.named_weights():
        assert torch.allclose(fsdp["weights"][name], weight, rtol=1e-5, atol=1e-6), name
    initial = dict(PolicyWorker(tiny_model_dir, settings()).named_weights())
    assert any(not torch.equal(w, initial[n]) for n, w in single.named_weights())  # the update moved them


def _deepspeed_rank(rank: int, port: int, model_dir: str, out: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    os.environ.update(LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    try:
        worker = PolicyWorker(model_dir, settings(), strategy=DeepSpeedZeRO(stage=3))
        engine = worker.strategy.engine
        grads: dict[str, torch.Tensor] = {}
        engine_step = engine.step

        def capturing_step() -> None:  # ZeRO-3 keeps a partition of each gradient per rank: gather it
            if engine.is_gradient_accumulation_boundary():
                for name, parameter in worker.model.named_parameters():
                    grads[name] = deepspeed.utils.safe_get_full_grad(parameter).detach().clone()
            engine_step()

        engine.step = capturing_step
        metrics = update_on_fixed_batch(worker)
        weights = dict(worker.named_weights())
        if rank == 0:
            torch.save({"metrics": metrics, "grads": grads, "weights": weights}, out)
    finally:
        dist.destroy_process_group()
    leave_spawned_rank()  # DeepSpeed has aborted a finished rank at interpreter exit


def test_deepspeed_zero3_two_ranks_equal_the_single_process_update(tiny_model_dir, tmp_path):
    """ZeRO-3 on 2 gloo ranks, two micro-batches per rank (DeepSpeed's gradient accumulation)."""
    out = tmp_path / "deepspeed.pt"
    mp.spawn(_deepspeed_rank, args=(free_loopback_port(), tiny_model_dir, str(out)), nprocs=2)
    zero = torch.load(out)
    single = PolicyWorker(tiny_model_dir, settings())
    metrics, grads = train_once(single)
    assert zero["grads"].keys() == grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(zero["grads"][name].reshape(grad.shape), grad, rtol=1e-4, atol=1e-7), name
    for key in ("policy/loss", "policy/grad_norm", "policy/entropy"):
        assert zero["metrics"][key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), key
    # AdamW divides by sqrt(v) + eps, so a gradient near eps carries its (allowed) rounding difference into
    # the step almost whole: on an AVX2 EPYC one o_proj gradient of 3.07e-7 came out 3.02e-7 over 2 ranks
    # and its step moved by 2.5e-6. A wrong update is off by up to lr (1e-3): 1% of lr still catches it.
    for name, weight in single.named_weights():
        assert torch.allclose(zero["weights"][name], weight, rtol=1e-5, atol=1e-2 * settings().lr), name
