"""Where a training process computes, and what follows from it.

One setting decides (``trainer.device``): the models, optimizer state, batches and the loss live on
the resolved device; autocast, the process-group backend and the RNG states a checkpoint keeps all
follow from it. CPU and CUDA are the two device types aloft trains on.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from typing import Any

import numpy as np
import torch

DEVICE_SETTING = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
"""What ``trainer.device`` accepts."""


def resolve_device(
    setting: str = "auto", local_rank: int | None = None, key: str = "trainer.device"
) -> torch.device:
    """The device a training process uses.

    ``auto``: CUDA when torch sees a GPU, else the CPU. ``cuda`` (and ``auto`` on a GPU machine):
    one GPU per local rank, ``cuda:<local_rank>``, the rank read from ``LOCAL_RANK`` (torchrun, and
    aloft's own spawned ranks, set it; Ray shows each actor only its own GPU, as ``cuda:0``).
    ``cuda:N`` is taken as given. Raises ValueError, naming the fix, where CUDA is asked for and
    torch sees none (``key``: the setting's name in that message).
    """
    if not DEVICE_SETTING.match(setting):
        raise ValueError(f"{key}={setting!r} is not a device: use auto, cpu, cuda or cuda:N")
    if setting == "cpu" or (setting == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(
            f"{key}={setting} but torch sees no CUDA GPU (torch.cuda.is_available() is False, "
            f"torch {torch.__version__}): use {key}=auto or cpu, or install a CUDA build of torch"
        )
    if ":" in setting:
        index = int(setting.partition(":")[2])
    else:
        index = local_rank if local_rank is not None else int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"{key}={setting} resolves to cuda:{index} but torch sees {count} GPU(s): run at most "
            f"{count} local ranks per machine, or name an existing GPU ({key}=cuda:0)"
        )
    return torch.device("cuda", index)


def use_device(device: torch.device) -> None:
    """Make ``device`` this process's current GPU (NCCL and FSDP2's device mesh use the current one)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def process_group_backend(device: torch.device | str, cpu_collectives: bool = False) -> str:
    """NCCL for CUDA ranks, gloo for CPU ones. ``cpu_collectives``: CUDA ranks that also reduce CPU
    tensors (FSDP2's CPU offload keeps gradients there: the grad-norm reduction runs on them) get
    gloo for those beside NCCL."""
    if torch.device(device).type != "cuda":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if cpu_collectives else "nccl"


def autocast(device: torch.device | str, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device``'s type (a CPU context does nothing to CUDA ops, and back)."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def free_cached_memory(device: torch.device | str) -> None:
    """Give the allocator's cached blocks back to the device (after an offload): what other
    processes on the GPU, and ``torch.cuda.memory_reserved``, then see free. A no-op on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def rng_states() -> dict[str, Any]:
    """Every generator a training step draws from: Python's, NumPy's, torch's CPU one and, when
    CUDA is in use, every GPU's (``None`` otherwise)."""
    cuda_in_use = torch.cuda.is_available() and torch.cuda.is_initialized()
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if cuda_in_use else None,
    }


def set_rng_states(state: dict[str, Any]) -> None:
    """Restore what ``rng_states`` saved. GPU states are restored where the checkpoint has them
    and this process has as many GPUs; a checkpoint from a CPU run resumes on a GPU (its GPU
    generators then start from the seed) and the other way round."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        if len(cuda) != torch.cuda.device_count():
            raise ValueError(
                f"this checkpoint holds the RNG states of {len(cuda)} GPU(s) and this process sees "
                f"{torch.cuda.device_count()}: resume with the same CUDA_VISIBLE_DEVICES"
            )
        torch.cuda.set_rng_state_all(cuda)
