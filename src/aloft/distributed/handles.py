"""Weights handed to another process on the same machine by handle, not sent through a socket.

Colocated placement puts a learner and an engine on one device (one GPU, or one node's CPUs): the
learner writes its named weights once into one flat buffer in the engine's dtype, and the engine
maps that same memory and loads from it. A GPU buffer travels as a CUDA IPC handle (the engine
process opens the learner's allocation; NCCL cannot connect two processes on one GPU), a CPU buffer
as a file in shared memory (``/dev/shm``) that both processes map. The handle itself is a few bytes
and pickles through Ray.

Lifetime: the learner keeps its ``SharedWeights`` until every engine has loaded (``close`` then
frees the buffer; the engine's mapping, if still alive, keeps its pages).

Shapes: the buffer is ``[N]`` (N = total elements); ``open_weights`` returns ``(name, view)`` pairs
shaped as the manifest says, views of the mapped buffer (no copy).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_SHARED_MEMORY = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
_serial = itertools.count()


@dataclass(frozen=True)
class WeightsHandle:
    """What an engine process needs to open a learner's shared weights (picklable, small)."""

    entries: tuple[tuple[str, tuple[int, ...]], ...]
    """Names and shapes, in buffer order."""
    dtype: str
    numel: int
    device: str
    """``cpu`` (``location`` is a shared-memory file) or ``cuda`` (``location`` is a CUDA IPC handle)."""
    location: Any

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=_dtype(self.dtype)).element_size()


class SharedWeights:
    """The learner's side: its weights, cast to ``dtype``, in one buffer other processes can open."""

    def __init__(self, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype) -> None:
        weights = list(weights)
        if not weights:
            raise ValueError("SharedWeights: no weights to share")
        device = weights[0][1].device
        numel = sum(tensor.numel() for _, tensor in weights)
        self._path: Path | None = None
        if device.type == "cuda":
            self.buffer = torch.empty(numel, dtype=dtype, device=device)
        elif device.type == "cpu":
            self._path = _SHARED_MEMORY / f"aloft-weights-{os.getpid()}-{next(_serial)}"
            self.buffer = torch.from_file(str(self._path), shared=True, size=numel, dtype=dtype)
        else:
            raise ValueError(f"SharedWeights: weights on {device} cannot be shared by handle (cpu or cuda)")
        offset = 0
        for _, tensor in weights:
            self.buffer[offset : offset + tensor.numel()].copy_(tensor.detach().reshape(-1))
            offset += tensor.numel()
        if device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            torch.cuda.current_stream(device).synchronize()  # the copies are done before anyone reads
            location: Any = reduce_tensor(self.buffer)
        else:
            location = str(self._path)
        self.handle = WeightsHandle(
            entries=tuple((name, tuple(tensor.shape)) for name, tensor in weights),
            dtype=str(dtype).removeprefix("torch."),
            numel=numel,
            device=device.type,
            location=location,
        )

    def close(self) -> None:
        """Free the buffer (after every engine has loaded from it)."""
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
        on_gpu = self.buffer.is_cuda
        self.buffer = torch.empty(0)
        if on_gpu:
            torch.cuda.empty_cache()  # the learner's process holds no cache while its engine generates

    def __del__(self) -> None:  # a learner that dies between share and close leaves no file behind
        path = getattr(self, "_path", None)
        if path is not None:
            path.unlink(missing_ok=True)


def open_weights(handle: WeightsHandle) -> list[tuple[str, torch.Tensor]]:
    """An engine process's side: ``(name, tensor)`` views of the learner's shared buffer."""
    dtype = _dtype(handle.dtype)
    if handle.device == "cuda":
        rebuild, args = handle.location
        args = list(args)
        # The 7th argument is the device index in the learner's numbering; colocated processes see
        # their shared GPU as their own current device.
        args[6] = torch.cuda.current_device()
        flat = rebuild(*args)
    else:
        flat = torch.from_file(handle.location, shared=True, size=handle.numel, dtype=dtype)
    views, offset = [], 0
    for name, shape in handle.entries:
        numel = int(torch.Size(shape).numel())
        views.append((name, flat[offset : offset + numel].view(shape)))
        offset += numel
    return views


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)
