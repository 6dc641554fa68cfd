"""Weight sync over a real torch.distributed gloo group on loopback: a trainer process and an engine process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from aloft.distributed import (
    WeightReceiver,
    WeightSender,
    free_loopback_port,
    init_loopback_group,
    plan_buckets,
)
from aloft.models import build_tiny_model

PROMPT = [5, 17, 42, 9, 33]


def test_plan_buckets_groups_consecutive_tensors_under_the_size():
    assert plan_buckets([10, 10, 10], element_size=2, bucket_bytes=40) == [[0, 1], [2]]
    assert plan_buckets([100, 1, 1], element_size=4, bucket_bytes=16) == [[0], [1, 2]]  # too big: alone
    assert plan_buckets([], element_size=4, bucket_bytes=16) == []


def _sync(rank: int, port: int, trainer_dir: str, engine_dir: str, dtype: str, out: str) -> None:
    """Rank 0 is the trainer (weights of ``trainer_dir``), rank 1 an engine built from ``engine_dir``."""
    from transformers import AutoModelForCausalLM

    from aloft.inference.hf import HFEngine
    from aloft.types import GenerationRequest, SamplingParams

    init_loopback_group(rank, 2, port)
    torch_dtype = getattr(torch, dtype)
    try:
        if rank == 0:
            trainer = AutoModelForCausalLM.from_pretrained(trainer_dir).eval()
            weights = list(trainer.state_dict().items())
            stats = WeightSender(dtype=torch_dtype, bucket_bytes=64 << 10).send(weights)
            box: list[object] = [None]
            dist.broadcast_object_list(box, src=1)
            before, after = box[0]
            # The trainer's own logprobs of the tokens the engine generated after the sync, from its
            # weights in the engines' dtype (what was sent).
            ids = torch.tensor([PROMPT + after["tokens"]])
            with torch.no_grad():
                logits = trainer.to(torch_dtype)(ids).logits[0, len(PROMPT) - 1 : -1].float()
            trainer_logprobs = torch.log_softmax(logits, -1).gather(1, ids[0, len(PROMPT) :, None])[:, 0]
            expected_bytes = (
                sum(t.numel() for _, t in weights) * torch.empty((), dtype=torch_dtype).element_size()
            )
            Path(out).write_text(
                json.dumps(
                    {
                        "sent_bytes": stats.bytes,
                        "expected_bytes": expected_bytes,
                        "buckets": stats.buckets,
                        "tensors": stats.tensors,
                        "before": before,
                        "after": after,
                        "trainer_logprobs": trainer_logprobs.tolist(),
                    }
                )
            )
        else:
            engine = HFEngine(engine_dir, dtype=dtype)
            greedy = [
                GenerationRequest(prompt_ids=PROMPT, sampling=SamplingParams(max_tokens=8, temperature=0))
            ]

            def run(engine: HFEngine) -> dict:
                completion = asyncio.run(engine.generate(greedy))[0]
                return {
                    "tokens": completion.token_ids,
                    "logprobs": completion.logprobs,
                    "version": engine.version,
                }

            before = run(engine)
            weights, stats = WeightReceiver().receive()
            asyncio.run(engine.update_weights(weights, version=1))
            # An engine built from the trainer's checkpoint directly: what the sync must reproduce exactly.
            reference = HFEngine(trainer_dir, dtype=dtype)
            after = run(engine) | {"received_bytes": stats.bytes, "reference": run(reference)}
            dist.broadcast_object_list([(before, after)], src=1)
            engine.close()
            reference.close()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_process_follows_the_trainer_after_a_broadcast(tmp_path, dtype):
    trainer_dir = build_tiny_model(tmp_path / "trained", hidden_size=64, num_layers=2, seed=1)
    engine_dir = build_tiny_model(tmp_path / "initial", hidden_size=64, num_layers=2, seed=0)
    out = tmp_path / "result.json"
    mp.spawn(_sync, args=(free_loopback_port(), str(trainer_dir), str(engine_dir), dtype, str(out)), nprocs=2)
    result = json.loads(out.read_text())
    assert result["sent_bytes"] == result["expected_bytes"] == result["after"]["received_bytes"]
    assert result["buckets"] > 1  # 64 KiB buckets: the tiny model takes several
    assert result["after"]["version"] == 1
    trainer, engine = torch.tensor(result["trainer_logprobs"]), torch.tensor(result["after"]["logprobs"])
    before = torch.tensor(result["before"]["logprobs"])
    reference = result["after"]["reference"]
    assert (
        result["after"]["tokens"] == reference["tokens"]
        and result["after"]["logprobs"] == reference["logprobs"]
    )
    tolerance = 1e-4 if dtype == "float32" else 5e-2  # bf16: KV-cached decode vs one full forward
    assert (engine - trainer).abs().max() <= tolerance, (engine - trainer).abs().max()
    # Before the sync the engine was another model: its tokens or logprobs were far off.
    assert result["before"]["tokens"] != result["after"]["tokens"] or (before - engine).abs().max() > 0.1
