"""LoRA adapters (peft) on a policy, and a LoRA checkpoint merged back into plain weights.

The trainer's checkpoints of a LoRA run hold the peft state dict (the frozen base weights under
``base_model.model.<name>.base_layer`` and the adapters' ``lora_A`` / ``lora_B``); an engine or an
eval needs plain HF weights. ``merged_weights`` rebuilds the same peft model the trainer trained and
merges it with peft's own code, so an unexported checkpoint evaluates exactly as its export would.
"""

from __future__ import annotations

from typing import Any

import torch

from aloft.models import load_model
from aloft.types import LoraAdapters

_PREFIX = "base_model.model."
_A, _B, _BASE = ".lora_A.default.weight", ".lora_B.default.weight", ".base_layer."


def with_lora(model: Any, lora: dict[str, Any]) -> Any:
    """``model`` wrapped with LoRA adapters: ``lora = {"r", "alpha", "target_modules"}``."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], target_modules=lora["target_modules"])
    )


def is_lora_state(state: dict[str, torch.Tensor]) -> bool:
    return any(".lora_A." in name for name in state)


def lora_scale(lora: dict[str, Any]) -> float:
    """peft's scaling of ``B @ A``: alpha / r."""
    return lora["alpha"] / lora["r"]


def adapters_from_state(state: dict[str, torch.Tensor], scale: float) -> LoraAdapters:
    """The adapters of a LoRA policy's full (peft-named) state dict, under the HF module names."""
    modules = {}
    for name, a in state.items():
        if name.endswith(_A):
            module = name[: -len(_A)]
            modules[module.removeprefix(_PREFIX)] = (a.detach().clone(), state[module + _B].detach().clone())
    return LoraAdapters(scale=scale, modules=modules)


def merged_state(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Plain HF weights from a LoRA policy's full (peft-named) state dict: each adapted module's
    weight is ``W0 + (B @ A) * scale``, as peft's merge computes it (in the weights' dtype)."""
    out = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        plain = name.removeprefix(_PREFIX).replace(_BASE, ".")
        if _BASE in name and name.endswith(".weight"):
            module = name[: name.rindex(_BASE)]
            if module + _A in state:
                delta = (state[module + _B] @ state[module + _A]) * scale
                tensor = tensor.detach() + delta.to(tensor.dtype)
        out[plain] = tensor.detach()
    return out


def merged_weights(
    base_model_path: str, state: dict[str, torch.Tensor], lora: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Plain HF weights (adapters merged) of a LoRA checkpoint's ``state`` over its base model."""
    model = with_lora(load_model(base_model_path, dtype=torch.float32), lora)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [name for name in missing if "lora_" in name]:
        raise ValueError(
            f"the checkpoint does not match a LoRA model of rank {lora['r']} on {lora['target_modules']} "
            f"over {base_model_path} (unexpected: {unexpected[:3]}, missing: {missing[:3]})"
        )
    return dict(model.merge_and_unload(safe_merge=True).state_dict())
