"""The experiment's state keeps a LoRA checkpoint as its adapters alone, converting one an older run
wrote with the whole model, and refuses a full fine-tune's."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from aloft.experiments.sql_state import _save_checkpoint
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS
from aloft.training.lora import base_fingerprint
from aloft.training.lora_checkpoint import with_saved_adapters

PREFIX = "base_model.model.model.layers.0.self_attn.q_proj"


def _checkpoint(tmp_path, state):
    step = tmp_path / "step_3"
    step.mkdir()
    save_file(state, str(step / POLICY_WEIGHTS))
    for name in ("policy_optim.pt", "trainer_state.pt"):
        torch.save({"step": 3}, step / name)
    return step


def test_a_full_state_lora_checkpoint_is_kept_as_its_adapters(tmp_path):
    generator = torch.Generator().manual_seed(0)
    state = {
        f"{PREFIX}.base_layer.weight": torch.randn(8, 8, generator=generator),
        f"{PREFIX}.lora_A.default.weight": torch.randn(2, 8, generator=generator),
        f"{PREFIX}.lora_B.default.weight": torch.randn(8, 2, generator=generator),
    }
    _save_checkpoint(_checkpoint(tmp_path, state), tmp_path / "kept")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [
        POLICY_ADAPTERS,
        "policy_optim.pt",
        "trainer_state.pt",
    ]
    fresh = {**state, f"{PREFIX}.lora_A.default.weight": torch.zeros(2, 8)}  # a resumed run's state
    restored = with_saved_adapters(tmp_path / "kept" / POLICY_ADAPTERS, fresh, base_fingerprint(fresh), "m")
    assert all(torch.equal(restored[k], state[k]) for k in state)


def test_a_full_fine_tunes_checkpoint_is_refused(tmp_path):
    step = _checkpoint(tmp_path, {"model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4)})
    with pytest.raises(ValueError, match="full fine-tune's checkpoint"):
        _save_checkpoint(step, tmp_path / "kept")


def test_the_experiment_reads_its_preset_model_without_data(tmp_path):
    """``--state`` restores the warm start over the preset's model when no ``model.path=`` is given: the
    preset alone names no data, so it is read, not checked as a whole run."""
    from aloft.config import load_config
    from aloft.experiments.skyrl_sql import _preset_model
    from aloft.experiments.sql_plan import ExperimentPlan

    expected = load_config("skyrl_sql", ["data.builder=sql"]).model.path
    assert _preset_model(ExperimentPlan(out=tmp_path)) == expected
    assert _preset_model(ExperimentPlan(out=tmp_path, model="/elsewhere")) == "/elsewhere"
