"""Ulysses sequence parallelism over 2 gloo ranks equals one process: logprobs, loss and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tests.training.test_packing import random_batch
from transformers import AutoModelForCausalLM

from aloft.algorithms.logits import logprobs_from_logits
from aloft.distributed import free_loopback_port, init_loopback_group
from aloft.models import build_tiny_model
from aloft.training.forward import token_logits
from aloft.training.ulysses import sum_gradients, ulysses_token_logprobs


def problem(model_dir: str):
    model = AutoModelForCausalLM.from_pretrained(model_dir).float()
    batch = random_batch(model.config.vocab_size, rows=5, seed=3)
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(3))
    return model, batch, advantages


def _sp_rank(rank: int, port: int, model_dir: str, out: str) -> None:
    init_loopback_group(rank, 2, port)
    try:
        model, batch, advantages = problem(model_dir)
        local = ulysses_token_logprobs(model, batch)
        tokens = batch.loss_mask.sum()
        loss = -(local.logprobs * advantages[local.rows, local.columns]).sum() / tokens  # this rank's share
        loss.backward()
        sum_gradients(model)
        pieces: list[object] = [None, None]
        dist.all_gather_object(pieces, (local.logprobs.detach(), local.rows, local.columns, loss.item()))
        if rank == 0:
            grads = {n: p.grad for n, p in model.named_parameters()}
            torch.save({"pieces": pieces, "grads": grads}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["kv-heads-split", "kv-heads-repeated"])
def test_sequence_parallel_two_ranks_equal_one(tmp_path, kv_heads):
    """4 query heads over 2 ranks; 1 key/value head cannot be split, so each rank repeats it first."""
    tiny_model_dir = str(build_tiny_model(tmp_path / "model", num_heads=4, num_kv_heads=kv_heads))
    out = tmp_path / "sp.pt"
    mp.spawn(_sp_rank, args=(free_loopback_port(), tiny_model_dir, str(out)), nprocs=2)
    sp = torch.load(out)

    model, batch, advantages = problem(tiny_model_dir)
    logits, targets, to_rows = token_logits(model, batch, share_prompts=False, packing=True)
    logprobs = to_rows(logprobs_from_logits(logits, targets))
    loss = -(logprobs * advantages * batch.loss_mask).sum() / batch.loss_mask.sum()
    loss.backward()

    gathered = torch.zeros_like(logprobs)
    counts = torch.zeros_like(logprobs)
    for values, rows, columns, _ in sp["pieces"]:
        assert len(values) > 0  # both ranks held completion tokens
        gathered[rows, columns] = values
        counts[rows, columns] += 1
    mask = batch.loss_mask.bool()
    assert torch.equal(counts[mask], torch.ones_like(counts[mask]))  # every token on exactly one rank
    assert torch.allclose(gathered[mask], logprobs.detach()[mask], atol=1e-5)
    assert sum(piece[3] for piece in sp["pieces"]) == pytest.approx(loss.item(), abs=1e-6)
    for name, parameter in model.named_parameters():
        assert torch.allclose(sp["grads"][name], parameter.grad, rtol=1e-4, atol=1e-6), name
