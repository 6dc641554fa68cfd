"""LoRA runs: the reference is the policy's own base (no second copy), and checkpoints merge exactly."""

from __future__ import annotations

import pytest
import torch
from tests.trainer.test_trainer import BASE

from aloft.config import load_config
from aloft.trainer import Trainer
from aloft.training import ReferenceWorker, collate

LORA = [
    "model.lora_rank=4",
    "model.lora_alpha=8",
    "algorithm.kl_coef=0.1",
    "optim.lr=5e-2",
    "env=test_digits",
]


def test_the_reference_of_a_lora_run_is_its_base_with_adapters_disabled(tiny_overrides):
    trainer = Trainer(load_config(None, [*BASE, *tiny_overrides, *LORA, "trainer.max_steps=2"]))
    trainer.fit()
    learner = trainer.c.learner
    assert learner.reference.model is learner.policy.model  # one model in memory, not two
    groups = trainer.c.run(trainer.generate_groups(trainer.c.loader.next_batch(), seed=3, prefix="g"))
    trajectories = [t for g in groups for t in g.trajectories]
    batch = collate(trajectories, trainer.c.pad_token_id, {g.group_id: i for i, g in enumerate(groups)})
    separate = ReferenceWorker(
        trainer.cfg.model.path,
        temperature=trainer.cfg.generator.temperature,
        micro_batching=learner.policy.settings.micro_batching,
        bf16_autocast=False,
    )
    mask = batch.loss_mask.bool()
    reference = learner.reference.compute_logprobs(batch)
    assert torch.allclose(reference[mask], separate.compute_logprobs(batch)[mask], atol=1e-5)
    policy = learner.policy.compute_logprobs(batch)  # the adapters are back on after the reference pass
    assert (policy[mask] - reference[mask]).abs().max() > 1e-3


def test_a_lora_export_is_a_merged_model_and_an_adapter_that_load_to_the_same_policy(tiny_overrides):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer = Trainer(
        load_config(None, [*BASE, *tiny_overrides, *LORA, "trainer.max_steps=1", "trainer.export_final=true"])
    )
    trainer.fit()
    export = trainer.c.run_dir / "export"
    assert trainer.c.policy.lora  # the export merged a copy; the policy still trains its adapters
    merged = AutoModelForCausalLM.from_pretrained(export)
    base = AutoModelForCausalLM.from_pretrained(trainer.cfg.model.path)
    adapted = PeftModel.from_pretrained(base, export / "adapter").merge_and_unload()
    for name, tensor in merged.state_dict().items():
        assert torch.allclose(tensor, adapted.state_dict()[name], atol=1e-6), name
    adapter_bytes = sum(f.stat().st_size for f in (export / "adapter").iterdir())
    merged_bytes = (export / "model.safetensors").stat().st_size
    assert adapter_bytes < merged_bytes / 5


def test_an_adapter_only_sync_gives_the_engine_the_merged_weights_for_a_fraction_of_the_bytes(tiny_overrides):
    """Each step's sync sends the adapters alone; the engine merges them over its base weights and
    then samples with the trainer's logprobs, exactly as after a full merged sync."""
    common = [*BASE, *tiny_overrides, *LORA, "trainer.max_steps=2", "placement.verify_sync=true"]
    adapter = Trainer(load_config(None, [*common, "trainer.name=adapter"]))
    by_adapter = adapter.fit()
    merged = Trainer(load_config(None, [*common, "trainer.name=merged", "placement.lora_sync=merged"]))
    by_merged = merged.fit()
    assert by_adapter["sync/logprob_max_gap"] <= 1e-4 and by_merged["sync/logprob_max_gap"] <= 1e-4
    assert by_adapter["sync/bytes"] < 0.25 * by_merged["sync/bytes"]
    engine_a = dict(adapter.c.engine.model.named_parameters())
    for name, tensor in merged.c.engine.model.named_parameters():
        assert torch.allclose(engine_a[name], tensor, atol=1e-6), name
    # After a full sync the engine no longer holds the base the adapters apply to: refused, not added twice.
    engine, adapters = merged.c.engine, merged.c.policy.lora_adapters()
    with pytest.raises(RuntimeError, match="update_lora after a full update_weights"):
        merged.c.run(engine.update_lora(adapters, version=3))


def test_adapters_saved_in_peft_format_load_back_into_peft_as_the_same_policy(tiny_model_dir, tmp_path):
    """``LoraAdapters.save_peft`` is what vLLM's LoRA loading reads: peft itself must read it back to
    the policy the adapters came from (same scale, same modules)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from aloft.training.lora import adapters_from_state, lora_scale, with_lora

    lora = {"r": 4, "alpha": 12, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    policy = with_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    adapters = adapters_from_state(policy.state_dict(), lora_scale(lora))
    adapters.save_peft(tmp_path / "adapter")
    adapters.save_peft(tmp_path / "adapter")  # a second sync replaces the first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
    loaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "adapter"
    )
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, policy(ids).logits, atol=1e-5)
        with policy.disable_adapter():
            assert not torch.allclose(loaded(ids).logits, policy(ids).logits, atol=1e-3)
