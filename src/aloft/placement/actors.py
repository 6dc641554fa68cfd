"""The two Ray actor classes of a run. Plain classes here (``ray.remote`` wraps them in
aloft.placement.ray_run), defined in an importable module so workers can unpickle them."""

from __future__ import annotations

import asyncio
import datetime
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from aloft.config import AloftConfig
from aloft.distributed import (
    LOOPBACK,
    SharedWeights,
    WeightReceiver,
    WeightSender,
    WeightsHandle,
    free_port,
    open_weights,
    side_group,
)
from aloft.inference.base import supports_lora_sync
from aloft.models.compute_thread import on_compute_thread
from aloft.models.device import process_group_backend, resolve_device
from aloft.trainer.learner import Learner, build_learner
from aloft.trainer.seeding import seed_everything
from aloft.types import Completion, GenerationRequest, LoraAdapters, Trajectory, TrajectoryGroup

SYNC_GROUP = "aloft_weight_sync"


def node_address() -> tuple[str, int]:
    """This node's address as Ray knows it (127.0.0.1 on a local instance) and a free port on it."""
    import ray

    host = ray.util.get_node_ip_address()
    return host, free_port(host)


class LearnerActor:
    """One training process: a ``Learner`` (rank ``rank`` of ``world_size``) and the sending side of
    the weight sync (rank 0 only)."""

    def __init__(self, threads: int) -> None:
        torch.set_num_threads(threads)
        self.learner: Learner | None = None
        self.sender: WeightSender | None = None
        self.sync_group: Any = None
        self.shared: SharedWeights | None = None
        self.share_seconds = 0.0
        self.home = torch.device("cpu")

    def address(self) -> tuple[str, int]:
        return node_address()

    def setup(self, cfg: AloftConfig, rank: int, world_size: int, host: str, port: int) -> None:
        """Join the training group (when ``world_size > 1``) and build the workers."""
        if world_size > 1:
            os.environ["LOCAL_RANK"] = "0"  # Ray shows each actor its own devices only (DeepSpeed reads it)
            if host == LOOPBACK:  # gloo would otherwise pick the host's first interface
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            # Ray shows a GPU actor its own GPU only: cuda:0 when the training bundles hold GPUs.
            dist.init_process_group(
                process_group_backend(
                    resolve_device(cfg.trainer.device, local_rank=0), cfg.trainer.fsdp_cpu_offload
                ),
                init_method=f"tcp://{host}:{port}",
                rank=rank,
                world_size=world_size,
                timeout=datetime.timedelta(minutes=30),
            )
        seed_everything(cfg.trainer.seed, cfg.trainer.deterministic, 0)
        self.learner = build_learner(cfg)
        self.home = self.learner.policy.device  # where onload() brings it back

    def join_sync_group(
        self, host: str, port: int, world_size: int, engine_dtype: str, backend: str = "gloo"
    ) -> None:
        """Rank 0 joins the weight-sync group as its source (rank 0 of that group); over NCCL the
        buckets are built on this rank's GPU."""
        self.sync_group = side_group(host, port, 0, world_size, SYNC_GROUP, backend=backend)
        dtype = getattr(torch, engine_dtype.removeprefix("torch."))
        device = self._learner.policy.device if backend == "nccl" else "cpu"
        self.sender = WeightSender(dtype=dtype, group=self.sync_group, device=device)

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        started = time.perf_counter()
        metrics = self._learner.train_on(groups, step)
        return {**metrics, "timing/learner_s": time.perf_counter() - started}  # inside the actor

    def send_weights(self) -> dict[str, float]:
        """Gather the policy's weights (every rank: a collective) and broadcast them (rank 0)."""
        weights = self._learner.named_weights()
        if self.sender is None:
            return {}
        return self.sender.send(weights).metrics("sync/")

    def share_weights(self, engine_dtype: str) -> WeightsHandle:
        """Gather the policy's weights (every rank: a collective) into a buffer this rank's colocated
        engine opens by handle; kept until ``release_weights``."""
        started = time.perf_counter()
        dtype = getattr(torch, engine_dtype.removeprefix("torch."))
        self.release_weights()
        self.shared = SharedWeights(self._learner.named_weights(), dtype)
        self.share_seconds = time.perf_counter() - started
        return self.shared.handle

    def release_weights(self) -> float:
        """Free the shared buffer (every engine has loaded it); returns the seconds sharing took."""
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        return self.share_seconds

    def lora_adapters(self) -> LoraAdapters | None:
        """A LoRA policy's adapters alone for an adapter-only sync (every rank gathers: a collective
        under FSDP2); rank 0 returns them, the other ranks None."""
        adapters = self._learner.policy.lora_adapters()
        return adapters if self.sender is not None else None

    def max_logprob_gap(self, trajectories: list[Trajectory]) -> float:
        return self._learner.max_logprob_gap(trajectories)

    def trained_tokens(self) -> dict[str, dict[str, Any]]:
        return self._learner.trained

    def write_state(self, directory: str | None) -> None:
        self._learner.write_state(Path(directory) if directory else None)

    def read_state(self, directory: str) -> None:
        self._learner.read_state(Path(directory))

    def save_pretrained(self, directory: str | None) -> None:
        self._learner.save_pretrained(Path(directory) if directory else None)

    def offload(self) -> None:
        """Models and optimizer state to CPU (colocated: while the engine generates)."""
        self._learner.move_to("cpu")

    def onload(self) -> None:
        self._learner.move_to(self.home)

    @property
    def _learner(self) -> Learner:
        assert self.learner is not None, "LearnerActor.setup() has not run"
        return self.learner


class EngineActor:
    """One inference engine (an async actor: concurrent ``generate`` calls batch inside the engine)
    and the receiving side of the weight sync."""

    def __init__(self, backend: str, threads: int, **engine_kwargs: Any) -> None:
        from aloft.inference import make_engine

        torch.set_num_threads(threads)
        on_compute_thread(torch.set_num_threads, threads)  # the engine computes on this thread
        self.engine = make_engine(backend, **engine_kwargs)
        self.receiver: WeightReceiver | None = None
        self.sleeps = 0

    def address(self) -> tuple[str, int]:
        return node_address()

    def dtype(self) -> str:
        return str(getattr(self.engine, "dtype", torch.float32))

    async def join_sync_group(
        self, host: str, port: int, rank: int, world_size: int, backend: str = "gloo"
    ) -> None:
        # The rendezvous blocks until every member arrives: off the event loop.
        group = await asyncio.to_thread(side_group, host, port, rank, world_size, SYNC_GROUP, backend)
        # Over NCCL the weights arrive on this actor's GPU (Ray shows it as cuda:0).
        self.receiver = WeightReceiver(group=group, device="cuda" if backend == "nccl" else "cpu")

    async def receive_weights(self, version: int) -> float:
        """Receive one broadcast and load it; returns the seconds loading took."""
        assert self.receiver is not None, "join_sync_group() first"
        weights, _ = await asyncio.to_thread(self.receiver.receive)
        started = asyncio.get_running_loop().time()
        await self.engine.update_weights(weights, version)
        return asyncio.get_running_loop().time() - started

    async def load_shared_weights(self, handle: WeightsHandle, version: int) -> float:
        """Open a colocated learner's shared weights and load them; returns the seconds loading took."""
        started = asyncio.get_running_loop().time()
        weights = await asyncio.to_thread(open_weights, handle)
        await self.engine.update_weights(weights, version)
        del weights  # the engine copied them: let the mapping go
        return asyncio.get_running_loop().time() - started

    def supports_lora_sync(self) -> bool:
        return supports_lora_sync(self.engine)

    async def update_lora(self, adapters: LoraAdapters, version: int) -> float:
        """An adapter-only sync; returns the seconds loading took."""
        started = asyncio.get_running_loop().time()
        await self.engine.update_lora(adapters, version)  # type: ignore[attr-defined]
        return asyncio.get_running_loop().time() - started

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        return await self.engine.generate(requests)

    async def update_weights(self, weights: Any, version: int) -> None:
        await self.engine.update_weights(weights, version)

    async def sleep(self) -> None:
        self.sleeps += 1
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def pause(self) -> None:
        await self.engine.pause()

    async def resume(self) -> None:
        await self.engine.resume()

    async def sleep_count(self) -> int:
        return self.sleeps
