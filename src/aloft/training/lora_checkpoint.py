"""A LoRA policy's checkpoint: its adapters alone, over a base the resume must load again.

``write_adapter_checkpoint`` writes the ``lora_A`` / ``lora_B`` entries of the policy's full state
(``aloft.training.checkpoint.POLICY_ADAPTERS``: megabytes, where the whole model is gigabytes) with
the base's per-weight norms (``aloft.training.lora.base_fingerprint``) in the file's metadata;
``with_saved_adapters`` puts them back over the base the resumed run loaded, after checking it is
the same base (``same_base``) and the same adapters' shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from aloft.training.lora import adapter_entries, same_base

__all__ = ["with_saved_adapters", "write_adapter_checkpoint"]


def write_adapter_checkpoint(
    path: Path, state: dict[str, torch.Tensor], base_norms: dict[str, list[float]]
) -> None:
    """Write the adapters of ``state`` (a LoRA policy's full, peft-named state) to ``path``, with
    ``base_norms`` (the ``base_fingerprint`` of that state) in its metadata."""
    adapters = {name: tensor.detach().contiguous() for name, tensor in adapter_entries(state).items()}
    save_file(adapters, str(path), metadata={"base_fingerprint": json.dumps(base_norms)})


def with_saved_adapters(
    path: Path, state: dict[str, torch.Tensor], base_norms: dict[str, list[float]], model_path: str
) -> dict[str, torch.Tensor]:
    """``state`` (the resumed policy's full state, whose base has ``base_norms``) with the adapters
    saved at ``path``; a one-line ``ValueError`` when they were trained on another base or have
    other shapes (another rank or other target modules)."""
    with safe_open(str(path), framework="pt") as f:
        saved_base = json.loads((f.metadata() or {}).get("base_fingerprint", "{}"))
    if not same_base(saved_base, base_norms):
        raise ValueError(
            f"checkpoint {path.parent}: its LoRA adapters were trained on another base than the weights "
            f"now at model.path={model_path}; put that model back there, or start a new run"
        )
    adapters = load_file(str(path))
    if {k: v.shape for k, v in adapters.items()} != {k: v.shape for k, v in adapter_entries(state).items()}:
        raise ValueError(
            f"checkpoint {path.parent}: its LoRA adapters do not match this run's (model.lora_rank or "
            "model.lora_target_modules changed); resume with the run's own LoRA settings"
        )
    return {**state, **adapters}
