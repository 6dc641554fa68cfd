"""`aloft train` on 2 gloo ranks (fsdp2, ulysses): the same run as one process, and exact resume."""

from __future__ import annotations

import pytest

from aloft.config import load_config
from aloft.tracking import read_metrics
from aloft.trainer.trainer import run_dir_of, train

BASE = [
    "data.builder=arithmetic",
    "data.train_size=32",
    "data.eval_size=4",
    "env=test_digits",  # partial credit: the tiny model's rewards vary, so every step moves the weights
    "trainer.imports=[tests.trainer.envs]",
    "generator.max_new_tokens=10",
    "generator.max_total_tokens=10",
    "generator.n_samples=4",
    "trainer.prompts_per_step=4",
    "trainer.eval_every=0",
    "trainer.export_final=true",
    "trainer.deterministic=true",
    "optim.lr=1e-3",
    "optim.micro_batch_size=4",
    "optim.packing=false",  # padded micro-batches here; PACKED below packs (the default, optim.packing=auto)
]
COMPARED = (
    "reward/mean",
    "policy/loss",
    "policy/grad_norm",
    "logprob/sampler_abs_diff",
    "policy/update_kl",
    "policy/update_rel_norm",
)


def steps(config) -> list[dict]:
    rows = [row for row in read_metrics(run_dir_of(config) / "metrics.jsonl") if "policy/loss" in row]
    assert all(row["policy/grad_norm"] > 0 for row in rows)  # every compared step did train
    return rows


def run(tiny_overrides, name: str, *extra: str):
    config = load_config(None, [*BASE, *tiny_overrides, f"trainer.name={name}", *extra])
    final = train(config)
    return config, final


def test_fsdp2_two_ranks_train_like_one_process_and_resume(tiny_overrides):
    """Two FSDP2 steps on 2 ranks equal one process's; the run is stopped after step 1 (its checkpoint
    holds every rank's shard) and a second start continues it to the same step 2."""
    single, _ = run(tiny_overrides, "single", "trainer.max_steps=2")
    fsdp = ["trainer.strategy=fsdp2", "trainer.num_processes=2", "trainer.checkpoint_every=1"]
    run(tiny_overrides, "fsdp", "trainer.max_steps=1", *fsdp)
    resumed, final = run(tiny_overrides, "fsdp", "trainer.max_steps=2", *fsdp)  # picks up at step 1
    assert final["policy_version"] == 2.0  # rank 0's metrics come back from the spawned ranks
    expected, got = steps(single), steps(resumed)
    assert [row["step"] for row in got] == [1, 2]
    for one, two in zip(expected, got, strict=True):
        for key in COMPARED:
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)
    assert (run_dir_of(resumed) / "export" / "config.json").exists()  # gathered and written by rank 0


def test_fsdp2_with_lora_trains_like_one_process(tiny_overrides):
    """LoRA adapters (and the KL reference = the base under them) sharded over 2 ranks: the same
    steps as one process, the merged export gathered and written, the adapter synced alone."""
    lora = ["trainer.max_steps=2", "model.lora_rank=4", "algorithm.kl_coef=0.05", "optim.lr=1e-2"]
    single, _ = run(tiny_overrides, "lora-single", *lora)
    fsdp, final = run(tiny_overrides, "lora-fsdp", *lora, "trainer.strategy=fsdp2", "trainer.num_processes=2")
    expected, got = steps(single), steps(fsdp)
    for one, two in zip(expected, got, strict=True):
        for key in (*COMPARED, "policy/kl_to_ref"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)
    assert (run_dir_of(fsdp) / "export" / "config.json").exists()
    assert (run_dir_of(fsdp) / "export" / "adapter" / "adapter_config.json").exists()


PACKED = ["trainer.max_steps=2", "optim.packing=true", "optim.micro_batch_tokens=48"]


@pytest.mark.parametrize(
    "strategy",
    [
        "ulysses",  # one packed row split over the ranks
        "fsdp2",  # packed micro-batches balanced by tokens over the ranks (uneven counts get a filler pass)
    ],
)
def test_packed_training_on_two_ranks_trains_like_one_process(tiny_overrides, strategy):
    single, _ = run(tiny_overrides, "packed", *PACKED)
    split, _ = run(
        tiny_overrides, strategy, *PACKED, f"trainer.strategy={strategy}", "trainer.num_processes=2"
    )
    expected, got = steps(single), steps(split)
    assert [row["step"] for row in got] == [1, 2]
    for one, two in zip(expected, got, strict=True):
        for key in (*COMPARED, "policy/entropy"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)


@pytest.mark.parametrize("stage", [3, pytest.param(1, marks=pytest.mark.slow)])
def test_deepspeed_zero_trains_like_one_process_and_resumes(tiny_overrides, stage):
    """Two ZeRO steps on 2 ranks equal one process's, the second after a restart from step 1's
    checkpoint (it holds every rank's ZeRO partition)."""
    single, _ = run(tiny_overrides, "single", "trainer.max_steps=2")
    zero = ["trainer.strategy=deepspeed", f"trainer.zero_stage={stage}", "trainer.num_processes=2"]
    resume = [*zero, "trainer.checkpoint_every=1"]
    run(tiny_overrides, "zero", "trainer.max_steps=1", *resume)
    resumed, _ = run(tiny_overrides, "zero", "trainer.max_steps=2", *resume)
    expected, got = steps(single), steps(resumed)
    assert [row["step"] for row in got] == [1, 2]
    for one, two in zip(expected, got, strict=True):
        for key in COMPARED:
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (one["step"], key)
