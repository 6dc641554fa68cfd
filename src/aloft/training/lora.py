"""LoRA adapters (peft) on a policy, and a LoRA state dict turned into what engines load.

A LoRA policy's state dict (a checkpoint's ``policy.safetensors``, or gathered from FSDP2 shards)
holds the frozen base weights under ``base_model.model.<name>.base_layer`` and the adapters'
``lora_A`` / ``lora_B``. ``merged_state`` gives the plain HF weights (``W0 + (B @ A) * alpha / r``,
peft's arithmetic) for a full sync, an export or an eval; ``adapters_from_state`` gives the adapters
alone for an adapter-only sync.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
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


def adapter_entries(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The trained part of a LoRA policy's full state dict: its ``lora_A`` / ``lora_B`` entries
    (a few MB), which a checkpoint stores instead of the whole state (the frozen base is the run's
    ``model.path``)."""
    return {name: tensor for name, tensor in state.items() if ".lora_" in name}


def base_fingerprint(state: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """A LoRA policy's frozen base in brief (every entry but the adapters): each weight's L1 and L2
    norm in float64, so that an adapter-only checkpoint is never resumed on another base model.
    Norms, not bytes: a base rebuilt on another CPU (the same adapters merged again) may differ in a
    last bit, which ``same_base`` accepts; another model, or another fit, does not pass."""
    out = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        l1 = sum_of_squares = 0.0
        for chunk in tensor.detach().reshape(-1).split(1 << 22):  # float64 copies of 32 MB at most
            chunk = chunk.to(torch.float64)
            l1 += float(chunk.abs().sum())
            sum_of_squares += float(chunk.square().sum())
        out[name] = [l1, sum_of_squares**0.5]
    return out


def same_base(saved: dict[str, list[float]], current: dict[str, list[float]], rtol: float = 1e-6) -> bool:
    """Whether two ``base_fingerprint``s describe the same base, to ``rtol`` in every norm."""
    return saved.keys() == current.keys() and all(
        abs(a - b) <= rtol * max(abs(a), abs(b)) for name in saved for a, b in zip(saved[name], current[name])
    )


def merge_adapter(base: str, adapter: Path, out: Path) -> Path:
    """A plain model directory at ``out``, as a run's export writes it: ``base`` (a model directory
    or built-in name) loaded as a policy trains it (float32) with each adapted weight replaced by ``W0 + (B @ A) * alpha / r`` (peft's
    merge, ``merged_state``'s arithmetic) from the peft-format ``adapter`` directory, ``base``'s
    tokenizer, and ``out/adapter`` holding the adapters."""
    from safetensors.torch import load_file

    from aloft.models import load_model, load_tokenizer
    from aloft.training.checkpoint import write_directory_atomically

    config = json.loads((adapter / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    adapters = load_file(adapter / "adapter_model.safetensors")
    prefix, suffix_a = "base_model.model.", ".lora_A.weight"
    modules = [name[len(prefix) : -len(suffix_a)] for name in adapters if name.endswith(suffix_a)]
    model = load_model(base, dtype=torch.float32)
    state = model.state_dict()
    missing = [module for module in modules if f"{module}.weight" not in state]
    if missing:
        raise ValueError(
            f"merge_adapter: {base} has no weight {missing[0]}.weight that the adapters in {adapter} "
            "change; merge them over the base they were trained on"
        )
    for module in modules:
        a, b = adapters[f"{prefix}{module}.lora_A.weight"], adapters[f"{prefix}{module}.lora_B.weight"]
        weight = state[f"{module}.weight"]
        state[f"{module}.weight"] = weight + ((b @ a) * scale).to(weight.dtype)

    def write(directory: Path) -> None:
        model.save_pretrained(str(directory), safe_serialization=True, state_dict=state)
        load_tokenizer(base).save_pretrained(str(directory))
        shutil.copytree(adapter, directory / "adapter")

    return write_directory_atomically(out, write)
