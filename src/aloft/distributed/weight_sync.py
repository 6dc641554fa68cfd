"""Weight sync from a trainer to inference engines over a torch.distributed group, in buckets.

The trainer process (``src``) sends its named weights with ``WeightSender.send``; every other
rank of the group (engine processes) calls ``WeightReceiver.receive`` and gets the same
``(name, tensor)`` list to hand to ``engine.update_weights``. First one ``broadcast_object_list``
carries the manifest (names, shapes, dtype), then the weights travel as flat buckets of about
``bucket_bytes``, cast to the engines' dtype on the sender (half the bytes of float32 for bf16
engines). gloo on CPU, NCCL on GPUs: the code is the same, the group decides.

Shapes: each weight is sent flattened into a bucket ``[n]`` of one dtype; the receiver splits the
bucket back into the manifest's shapes (views of the received bucket, no copy).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEFAULT_BUCKET_BYTES = 256 << 20
"""256 MiB: gloo on loopback moved 1.5 GB/s with 16 MiB buckets and 2.3 GB/s with 256 MiB ones."""


@dataclass(frozen=True)
class SyncStats:
    """What one sync moved and how long it took (on this rank)."""

    seconds: float
    bytes: int
    buckets: int
    tensors: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def metrics(self, prefix: str = "sync/") -> dict[str, float]:
        return {
            f"{prefix}seconds": self.seconds,
            f"{prefix}bytes": float(self.bytes),  # as a local run's sync reports them
            f"{prefix}gigabytes": self.bytes / 1e9,
            f"{prefix}gb_per_s": self.gb_per_s,
            f"{prefix}buckets": float(self.buckets),
        }


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())


def consecutive_chunks(sizes: list[int], budget: int) -> list[list[int]]:
    """Consecutive indices grouped so each group's sizes sum to at most ``budget`` (a larger item goes
    alone). Weight buckets use it, and so do packed micro-batches (``aloft.training.packing``)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if current and total + size > budget:
            chunks.append(current)
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        chunks.append(current)
    return chunks


def plan_buckets(numels: list[int], element_size: int, bucket_bytes: int) -> list[list[int]]:
    """Consecutive tensor indices grouped into buckets of at most ``bucket_bytes`` (a larger tensor goes alone)."""
    return consecutive_chunks([numel * element_size for numel in numels], bucket_bytes)


class WeightSender:
    """The trainer's side: broadcast named weights to every other rank of ``group``."""

    def __init__(
        self,
        *,
        dtype: torch.dtype,
        group: dist.ProcessGroup | None = None,
        src: int = 0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        device: torch.device | str = "cpu",
    ) -> None:
        """``dtype``: what the engines hold (weights are cast before sending); ``device``: where buckets
        are built (``cuda`` for NCCL)."""
        self.dtype, self.group, self.src, self.bucket_bytes = dtype, group, src, bucket_bytes
        self.device = torch.device(device)
        # Two staging buffers, reused across syncs: a bucket is built in one while the other is on
        # the wire, and fresh 256 MiB allocations (page faults) cost as much as sending them.
        self._staging: list[torch.Tensor] = []

    def send(self, weights: Iterable[tuple[str, torch.Tensor]]) -> SyncStats:
        started = time.perf_counter()
        weights = list(weights)
        entries = [_Entry(name, tuple(tensor.shape)) for name, tensor in weights]
        buckets = plan_buckets([e.numel for e in entries], _element_size(self.dtype), self.bucket_bytes)
        dist.broadcast_object_list(
            [(entries, str(self.dtype), buckets)], group_src=self.src, group=self.group
        )
        sent = 0
        in_flight: list[tuple[dist.Work, torch.Tensor]] = []
        for number, bucket in enumerate(buckets):
            flat = self._flatten([weights[i][1] for i in bucket], staging=number % 2)
            # Asynchronous: the next bucket is cast while this one is on the wire (at most two alive).
            in_flight.append(
                (dist.broadcast(flat, group_src=self.src, group=self.group, async_op=True), flat)
            )
            if len(in_flight) > 1:
                in_flight.pop(0)[0].wait()
            sent += flat.numel() * flat.element_size()
        for work, _ in in_flight:
            work.wait()
        return SyncStats(time.perf_counter() - started, sent, len(buckets), len(entries))

    def _flatten(self, tensors: list[torch.Tensor], staging: int) -> torch.Tensor:
        """``[n]``: ``tensors`` end to end in the engines' dtype (one casting copy each, no ``cat``),
        in staging buffer ``staging``."""
        numel = sum(t.numel() for t in tensors)
        while len(self._staging) <= staging:
            self._staging.append(torch.empty(0, dtype=self.dtype, device=self.device))
        if self._staging[staging].numel() < numel:
            self._staging[staging] = torch.empty(numel, dtype=self.dtype, device=self.device)
        flat = self._staging[staging][:numel]
        offset = 0
        for tensor in tensors:
            flat[offset : offset + tensor.numel()].copy_(tensor.detach().reshape(-1))
            offset += tensor.numel()
        return flat


class WeightReceiver:
    """An engine process's side: receive what the ``WeightSender`` at ``src`` broadcasts.

    The returned tensors are views of receive buffers that the next ``receive`` reuses (same
    manifest): load them (``engine.update_weights`` copies) before receiving again.
    """

    def __init__(
        self, *, group: dist.ProcessGroup | None = None, src: int = 0, device: torch.device | str = "cpu"
    ) -> None:
        self.group, self.src, self.device = group, src, torch.device(device)
        self._plan: object = None
        self._flats: list[torch.Tensor] = []

    def receive(self) -> tuple[list[tuple[str, torch.Tensor]], SyncStats]:
        started = time.perf_counter()
        box: list[object] = [None]
        dist.broadcast_object_list(box, group_src=self.src, group=self.group)
        entries, dtype_name, buckets = box[0]  # type: ignore[misc]
        dtype = getattr(torch, str(dtype_name).removeprefix("torch."))
        plan = (dtype, [[entries[i].numel for i in bucket] for bucket in buckets])
        if plan != self._plan:
            self._plan = plan
            self._flats = [
                torch.empty(sum(entries[i].numel for i in bucket), dtype=dtype, device=self.device)
                for bucket in buckets
            ]
        flats = self._flats
        # Every bucket posted at once: each arrives as soon as the sender has it ready.
        for work in [
            dist.broadcast(flat, group_src=self.src, group=self.group, async_op=True) for flat in flats
        ]:
            work.wait()
        weights: list[tuple[str, torch.Tensor]] = []
        for bucket, flat in zip(buckets, flats):
            pieces = flat.split([entries[i].numel for i in bucket])
            weights += [(entries[i].name, piece.view(entries[i].shape)) for i, piece in zip(bucket, pieces)]
        received = sum(flat.numel() * flat.element_size() for flat in flats)
        return weights, SyncStats(time.perf_counter() - started, received, len(buckets), len(entries))


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
