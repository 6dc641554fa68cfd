"""A run's actors on Ray, and the driver's handles on them.

Placement groups (one bundle per training process, ``{"CPU": training_cpus, "GPU": training_gpus}``):

- ``colocated``: engine i lives in training bundle i; the two actors split the bundle's resources
  for Ray's bookkeeping but each uses all of its cores (they take turns: the engine sleeps while
  the learner trains, the learner's state moves to CPU while the engine generates).
- ``disaggregated``: engines get a placement group of their own (``{"CPU": engine_cpus, "GPU":
  engine_gpus}`` bundles), so they can sit on other devices or nodes.

Either way, weights travel after each step from the learner's rank 0 to every engine in buckets over
a torch.distributed group of their own (aloft.distributed: gloo on CPU, NCCL on GPUs).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from aloft.config import AloftConfig, ConfigError
from aloft.placement.actors import EngineActor, LearnerActor
from aloft.placement.cluster import connect
from aloft.types import Completion, GenerationRequest, Trajectory, TrajectoryGroup

PLACEMENT_TIMEOUT_S = 120


class RayEngines:
    """The ``InferenceEngine`` the driver's generator talks to: each ``generate`` call goes to the
    engine actor with the fewest requests in flight."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors
        self._in_flight = [0] * len(actors)
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        index = min(range(len(self.actors)), key=self._in_flight.__getitem__)
        self._in_flight[index] += len(requests)
        try:
            return await self.actors[index].generate.remote(requests)
        finally:
            self._in_flight[index] -= len(requests)

    async def update_weights(self, weights: Any, version: int) -> None:
        """Load weights given by the driver (a checkpoint path or tensors); the trainer's own sync
        goes through ``RayLearners.sync_weights`` instead."""
        weights = weights if isinstance(weights, str) else list(dict(weights).items())
        await asyncio.gather(*(actor.update_weights.remote(weights, version) for actor in self.actors))
        self.loaded(version)

    async def sleep(self) -> None:
        await asyncio.gather(*(actor.sleep.remote() for actor in self.actors))

    async def wake_up(self) -> None:
        await asyncio.gather(*(actor.wake_up.remote() for actor in self.actors))

    async def pause(self) -> None:
        await asyncio.gather(*(actor.pause.remote() for actor in self.actors))

    async def resume(self) -> None:
        await asyncio.gather(*(actor.resume.remote() for actor in self.actors))

    def loaded(self, version: int) -> None:
        """Every engine now holds ``version`` (a broadcast sync from the learners finished)."""
        self._version = version

    def close(self) -> None:
        """The actors belong to ``RayPlacement``, which ends them."""


class RayLearners:
    """The trainer's ``Learners`` on Ray: every call goes to all training actors (their methods are
    collectives under FSDP2) and returns rank 0's answer."""

    def __init__(
        self,
        actors: list[Any],
        engines: list[Any],
        engine_handle: RayEngines,
        colocated: bool,
        offload: bool,
        engine_dtype: str = "torch.float32",
        adapter_sync: bool = False,
    ) -> None:
        self.actors, self.engines, self.engine_handle = actors, engines, engine_handle
        self.colocated, self.offload, self.engine_dtype = colocated, offload, engine_dtype
        self.adapter_sync = adapter_sync
        """A LoRA policy's syncs send its adapters alone (every engine takes ``update_lora``)."""

    def _all(self, method: str, *args: Any) -> Any:
        return ray.get([getattr(actor, method).remote(*args) for actor in self.actors])[0]

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        return self._all("train_on", ray.put(groups), step)

    async def sync_weights(self, version: int) -> dict[str, float]:
        """The policy's weights into every engine: colocated engine i opens learner i's by handle,
        disaggregated engines take rank 0's broadcast; returns bytes, seconds and GB/s. A LoRA
        policy's adapters (~1% of the bytes) go through Ray's object store instead."""
        started = time.perf_counter()
        if self.adapter_sync:
            adapters = (await asyncio.gather(*(actor.lora_adapters.remote() for actor in self.actors)))[0]
            shared = ray.put(adapters)  # one copy in the object store, read by every engine
            loads = await asyncio.gather(
                *(engine.update_lora.remote(shared, version) for engine in self.engines)
            )
            self.engine_handle.loaded(version)
            return {
                "sync/bytes": float(adapters.nbytes),
                "sync/load_s": max(loads),
                "sync/total_s": time.perf_counter() - started,
            }
        if self.colocated:
            # Every rank gathers the full weights (a collective), so each engine's own learner shares them.
            handles = await asyncio.gather(
                *(actor.share_weights.remote(self.engine_dtype) for actor in self.actors)
            )
            loads = await asyncio.gather(
                *(
                    engine.load_shared_weights.remote(handles[i], version)
                    for i, engine in enumerate(self.engines)
                )
            )
            share_seconds = (
                await asyncio.gather(*(actor.release_weights.remote() for actor in self.actors))
            )[0]
            self.engine_handle.loaded(version)
            total = time.perf_counter() - started
            return {
                "sync/bytes": float(handles[0].nbytes),
                "sync/gigabytes": handles[0].nbytes / 1e9,
                "sync/seconds": total,
                "sync/gb_per_s": handles[0].nbytes / total / 1e9,
                "sync/share_s": share_seconds,
                "sync/load_s": max(loads),
                "sync/total_s": total,
            }
        sends = [actor.send_weights.remote() for actor in self.actors]
        loads = [engine.receive_weights.remote(version) for engine in self.engines]
        metrics = (await asyncio.gather(*sends))[0]
        load_seconds = max(await asyncio.gather(*loads))
        self.engine_handle.loaded(version)
        return {**metrics, "sync/load_s": load_seconds, "sync/total_s": time.perf_counter() - started}

    def max_logprob_gap(self, trajectories: list[Trajectory]) -> float:
        return self._all("max_logprob_gap", trajectories)

    def trained_tokens(self) -> dict[str, dict[str, Any]]:
        return ray.get(self.actors[0].trained_tokens.remote())  # rank 0's rows

    def write_state(self, directory: Path | None) -> None:
        ray.get([actor.write_state.remote(str(directory) if directory else None) for actor in self.actors])

    def read_state(self, directory: Path) -> None:
        self._all("read_state", str(directory))

    def save_pretrained(self, directory: Path | None) -> None:
        ray.get(
            [actor.save_pretrained.remote(str(directory) if directory else None) for actor in self.actors]
        )

    def enter_training(self) -> None:
        """Colocated: engines sleep (free their memory), the learners' state comes back to the device."""
        if self.colocated:
            ray.get([engine.sleep.remote() for engine in self.engines])
            if self.offload:
                self._all("onload")

    def enter_generation(self) -> None:
        """Colocated: the learners' state goes to CPU, engines wake to generate (and take the sync)."""
        if self.colocated:
            if self.offload:
                self._all("offload")
            ray.get([engine.wake_up.remote() for engine in self.engines])


def connect_for(cfg: AloftConfig) -> None:
    """Join ``placement.address`` or start a local instance with the CPUs the run's bundles need."""
    p = cfg.placement
    training = cfg.trainer.num_processes * p.training_cpus
    connect(p.address, num_cpus=training + (0 if p.mode == "colocated" else p.num_engines * p.engine_cpus))


class RayPlacement:
    """Start (or join) Ray, reserve placement groups, start every actor, wire the sync group."""

    def __init__(self, cfg: AloftConfig, model_path: str) -> None:
        p, ranks = cfg.placement, cfg.trainer.num_processes
        colocated = p.mode == "colocated"
        connect_for(cfg)
        self.groups: list[PlacementGroup] = []
        training = self._reserve([{"CPU": p.training_cpus, "GPU": p.training_gpus}] * ranks, "training")
        # Colocated actors split their bundle for Ray's accounting; each still uses every core of it.
        share = 0.5 if colocated else 1.0
        learner_cls = ray.remote(LearnerActor)
        self.learners = [
            learner_cls.options(
                num_cpus=p.training_cpus * share,
                num_gpus=p.training_gpus * share,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    training, placement_group_bundle_index=i
                ),
            ).remote(p.training_cpus)
            for i in range(ranks)
        ]
        host, port = ray.get(self.learners[0].address.remote())
        ray.get(
            [actor.setup.remote(cfg, rank, ranks, host, port) for rank, actor in enumerate(self.learners)]
        )

        if colocated:
            engine_group, engine_cpus, engine_gpus = training, p.training_cpus, p.training_gpus * share
        else:
            bundles = [{"CPU": p.engine_cpus, "GPU": p.engine_gpus}] * p.num_engines
            engine_group, engine_cpus, engine_gpus = (
                self._reserve(bundles, "engine"),
                p.engine_cpus,
                p.engine_gpus,
            )
        engine_cls = ray.remote(EngineActor)
        self.engines = [
            engine_cls.options(
                num_cpus=engine_cpus * share,
                num_gpus=engine_gpus,
                max_concurrency=1000,  # concurrent generate calls are what the engine batches
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    engine_group, placement_group_bundle_index=i
                ),
            ).remote(
                cfg.engine.backend,
                engine_cpus,
                model_or_path=model_path,
                tokenizer=model_path,
                dtype=cfg.engine.dtype,
                max_batch_size=cfg.engine.max_batch_size,
                # Ray hands a GPU actor its device as CUDA_VISIBLE_DEVICES (an hf engine's device=auto
                # finds it as cuda:0, and a GPU-less actor sees none); vLLM and SGLang find it alone.
                **cfg.engine_options(),
            )
            for i in range(p.num_engines)
        ]
        # Colocated engines open their learner's weights by handle (CUDA IPC or shared memory: NCCL
        # cannot connect two processes on one GPU); disaggregated ones take a broadcast, over NCCL
        # between GPUs and gloo otherwise.
        dtypes = set(ray.get([engine.dtype.remote() for engine in self.engines]))
        if len(dtypes) != 1:
            raise ConfigError(f"engines hold different dtypes {sorted(dtypes)}; they share one weight sync")
        engine_dtype = dtypes.pop()
        if not colocated:
            self._wire_weight_sync("nccl" if p.training_gpus and p.engine_gpus else "gloo", engine_dtype)
        self.engine = RayEngines(self.engines)
        adapter_sync = bool(cfg.model.lora_rank) and p.lora_sync == "adapter"
        self.learner_group = RayLearners(
            self.learners,
            self.engines,
            self.engine,
            colocated=colocated,
            offload=p.offload,
            engine_dtype=engine_dtype,
            adapter_sync=adapter_sync and all(ray.get([e.supports_lora_sync.remote() for e in self.engines])),
        )

    def _reserve(self, bundles: list[dict[str, float]], what: str) -> PlacementGroup:
        bundles = [{k: v for k, v in bundle.items() if v} for bundle in bundles]
        group = placement_group(bundles, strategy="PACK")
        self.groups.append(group)
        try:
            ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ConfigError(
                f"Ray could not place the {what} bundles {bundles[0]} x {len(bundles)} within "
                f"{PLACEMENT_TIMEOUT_S} s (cluster has {ray.cluster_resources()}): lower placement.*_cpus / "
                "*_gpus or add nodes"
            ) from None
        return group

    def _wire_weight_sync(self, backend: str, engine_dtype: str) -> None:
        host, port = ray.get(self.learners[0].address.remote())
        world = 1 + len(self.engines)
        ray.get(
            [self.learners[0].join_sync_group.remote(host, port, world, engine_dtype, backend)]
            + [
                engine.join_sync_group.remote(host, port, 1 + i, world, backend)
                for i, engine in enumerate(self.engines)
            ]
        )

    def engine_sleep_counts(self) -> list[int]:
        return ray.get([engine.sleep_count.remote() for engine in self.engines])

    def close(self) -> None:
        """End every actor of the run and free its placement groups (Ray itself keeps running)."""
        for actor in [*getattr(self, "learners", []), *getattr(self, "engines", [])]:
            ray.kill(actor)
        for group in self.groups:
            remove_placement_group(group)
        self.groups = []
