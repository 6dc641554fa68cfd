"""Weights by handle between colocated processes (aloft.distributed.handles): another process maps
the learner's very buffer (shared memory on the CPU; CUDA IPC on a GPU, the same code path past
the buffer), reads every weight exactly, and nothing is left in /dev/shm once the learner closes."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
import torch

from aloft.distributed import SharedWeights, WeightsHandle, open_weights


def weights() -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        ("model.embed_tokens.weight", torch.randn(50, 8, generator=generator)),
        ("model.layers.0.mlp.up_proj.weight", torch.randn(16, 8, generator=generator)),
        ("model.norm.weight", torch.randn(8, generator=generator)),
    ]


def engine_process(handle: WeightsHandle, results) -> None:
    """Another process: open the handle, report what it sees, write a mark into the shared buffer."""
    opened = open_weights(handle)
    # As plain numbers: a tensor put on a queue would itself travel by a shared-memory handle.
    results.put([(name, str(tensor.dtype), tensor.float().tolist()) for name, tensor in opened])
    opened[0][1][0, 0] = 1024.0  # the learner sees this only if the memory is one and the same


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_another_process_opens_the_learners_weights_exactly(dtype):
    shared = SharedWeights(weights(), dtype)
    handle = shared.handle
    assert handle.device == "cpu" and handle.nbytes == sum(t.numel() for _, t in weights()) * (
        4 if dtype == torch.float32 else 2
    )
    context = mp.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=engine_process, args=(handle, results))
    child.start()
    seen = results.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert [name for name, _, _ in seen] == [name for name, _ in weights()]
    for (_, got_dtype, got), (_, expected) in zip(seen, weights(), strict=True):
        assert got_dtype == str(dtype) and torch.equal(torch.tensor(got), expected.to(dtype).float())
    assert float(shared.buffer[0]) == 1024.0  # zero copy: the child wrote into the learner's buffer
    path = Path(handle.location)
    assert path.exists()
    shared.close()
    assert not path.exists()


def test_weights_on_other_devices_and_no_weights_are_refused():
    with pytest.raises(ValueError, match="no weights to share"):
        SharedWeights([], torch.float32)
    with pytest.raises(ValueError, match="cannot be shared by handle"):
        SharedWeights([("w", torch.empty(2, device="meta"))], torch.float32)
