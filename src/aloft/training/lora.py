"""LoRA adapters (peft) on a policy, and a LoRA state dict turned into what engines load.

A LoRA policy's state dict (a checkpoint's ``policy.safetensors``, or gathered from FSDP2 shards)
holds the frozen base weights under ``base_model.model.<name>.base_layer`` and the adapters'
``lora_A`` / ``lora_B``. ``merged_state`` gives the plain HF weights (``W0 + (B @ A) * alpha / r``,
peft's arithmetic) for a full sync, an export or an eval; ``adapters_from_state`` gives the adapters
alone for an adapter-only sync.
"""

from __future__ import annotations

from typing import Any

import torch

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
