"""A LoRA run checkpoints its adapters alone: a few MB a step instead of the whole model, resumed
only on the base it trained on, and evaluated like its export."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aloft.config import load_config
from aloft.models import build_tiny_model, load_tokenizer
from aloft.trainer import Trainer
from aloft.trainer.eval_command import checkpoint_weights, resolve_eval_source
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS
from aloft.training.lora import merge_adapter
from tests.trainer import envs  # noqa: F401  (registers the test envs)

LORA_RUN = [
    "data.builder=arithmetic",
    "data.train_size=16",
    "data.eval_size=4",
    "env=test_digits",
    "model.lora_rank=4",
    "optim.lr=1e-2",
    "trainer.prompts_per_step=2",
    "generator.n_samples=2",
    "generator.max_new_tokens=8",
    "trainer.checkpoint_every=2",
    "trainer.eval_every=0",
    "trainer.deterministic=true",
]


def train(overrides: list[str]) -> Trainer:
    trainer = Trainer(load_config(None, overrides))
    trainer.fit()
    return trainer


def test_a_lora_checkpoint_holds_the_adapters_and_evaluates_as_the_export(tiny_overrides, tmp_path):
    trainer = train(
        [*tiny_overrides, *LORA_RUN, "trainer.name=lora", "trainer.max_steps=2", "trainer.export_final=true"]
    )
    step = trainer.c.run_dir / "checkpoints" / "step_2"
    assert not (step / POLICY_WEIGHTS).exists()
    adapters = load_file(step / POLICY_ADAPTERS)
    assert adapters and all(".lora_A." in k or ".lora_B." in k for k in adapters)
    export = load_file(trainer.c.run_dir / "export" / "model.safetensors")
    adapter_bytes = sum(t.numel() * t.element_size() for t in adapters.values())
    model_bytes = sum(t.numel() * t.element_size() for t in export.values())
    assert adapter_bytes < model_bytes / 10

    # `aloft eval runs/lora/checkpoints/step_2` merges the adapters over the run's base: the weights
    # it serves are the export's.
    merged = checkpoint_weights(resolve_eval_source(str(step)))
    assert len(merged) == sum(".lora_A." in k for k in adapters)  # the adapted modules only
    for name, weight in merged.items():
        torch.testing.assert_close(weight, export[name].to(weight.dtype), rtol=0, atol=1e-6)
    assert any(not torch.equal(merged[name], load_file_base(trainer)[name]) for name in merged)

    # The export's adapters merged again over the base give the export, bit for bit.
    rebuilt = merge_adapter(trainer.cfg.model.path, trainer.c.run_dir / "export" / "adapter", tmp_path / "re")
    again = load_file(rebuilt / "model.safetensors")
    assert again.keys() == export.keys() and all(torch.equal(again[k], export[k]) for k in export)
    assert load_tokenizer(str(rebuilt)).encode("SELECT 1") == load_tokenizer(trainer.cfg.model.path).encode(
        "SELECT 1"
    )


def load_file_base(trainer: Trainer) -> dict[str, torch.Tensor]:
    return load_file(f"{trainer.cfg.model.path}/model.safetensors")


def test_a_lora_checkpoint_resumes_only_on_the_base_it_trained_on(tiny_model_dir, tiny_overrides, tmp_path):
    """The same model.path holding other weights (a base rebuilt differently, another fit) is
    refused in one line, before any step trains on the wrong base."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    on_base = [o for o in tiny_overrides if not o.startswith("model.path=")] + [f"model.path={base}"]
    train([*on_base, *LORA_RUN, "trainer.name=split", "trainer.max_steps=2"])
    other = build_tiny_model(tmp_path / "other", hidden_size=64, num_layers=2, seed=1)
    shutil.copyfile(Path(other) / "model.safetensors", base / "model.safetensors")
    with pytest.raises(ValueError, match="trained on another base") as info:
        train([*on_base, *LORA_RUN, "trainer.name=split", "trainer.max_steps=4"])
    assert "\n" not in str(info.value) and f"model.path={base}" in str(info.value)
