"""The Trainer: the stages of an RL step, run under an execution plan (docs/reference/design.md §1).

The stages are methods: ``generate_batch`` (prompts -> trajectory groups, engine + envs),
``update`` (advantages, policy and critic update, aloft.trainer.learner), ``sync_weights`` (policy
-> engines) and ``end_step`` (metrics, rollouts, eval, checkpoint). An execution plan
(aloft.trainer.plans, ``trainer.plan``) composes them: ``sync`` runs them one after another, the
way the algorithm box in aloft/trainer/plans/sync.py reads; ``one_step_off`` and ``fully_async``
overlap generation with updates. Where the workers and engines run (this process, local ranks, Ray
actors) is behind ``Components.learners`` and ``Components.engine``; no stage knows.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from aloft.algorithms import apply_soft_overlong_penalty, drop_failed_trajectories, drop_zero_variance_groups
from aloft.config import AloftConfig, ConfigError
from aloft.models.compute_thread import on_compute_thread
from aloft.models.device import process_group_backend, resolve_device, use_device
from aloft.seeds import mix_seed
from aloft.trainer.components import Components, build_components
from aloft.trainer.evaluation import evaluate
from aloft.trainer.failures import TooManyFailures, check_error_share
from aloft.trainer.plans import Batch, make_plan
from aloft.trainer.resume import load_checkpoint, save_checkpoint
from aloft.trainer.step_metrics import rollout_metrics, staleness_metrics
from aloft.types import GenerationRequest, RolloutStatus, SamplingParams, Trajectory, TrajectoryGroup


class Trainer:
    """Owns a run directory and runs its execution plan (``trainer.plan``); rerunning it resumes.

    The plan decides when to generate, update and sync (aloft.trainer.plans). What a plan may use,
    the whole plan API (no plan reaches further, into ``c`` or a private method):

    - state: ``cfg`` (the run's config), ``step`` (the last finished step; the policy version the
      engines hold), ``resumed_plan_state`` (what the plan gave ``end_step`` at the checkpoint this
      run resumed from, or None);
    - whole stages: ``generate_batch(step)`` (prompts -> trajectory groups, failures checked,
      dynamic sampling), ``update(groups, step)``, ``sync_weights(version, ...)``,
      ``end_step(step, batch, metrics, plan_state)`` (logging, eval, checkpoint; sets ``step``);
    - the parts of ``generate_batch``, for plans that generate group by group: ``next_prompts()``,
      ``generate_groups(rows, seed, prefix)``, ``shape_rewards(groups)``,
      ``check_failures(step, groups, failed, generated)``.
    """

    def __init__(self, config: AloftConfig) -> None:
        self.cfg = config
        if config.placement.backend == "ray":
            from aloft.placement import connect_for

            connect_for(config)  # on the main thread, where Ray installs its signal handlers
        # Every torch op of the run happens on the compute thread, construction and checkpoints included:
        # one parallel op on this thread would start a second OpenMP team, and two teams slow each
        # other down (aloft.models.compute_thread).
        self.c: Components = on_compute_thread(build_components, config)
        # Data-parallel ranks other than 0 only train: rank 0 generates, evaluates, logs and writes.
        self.is_main = self.c.is_main
        self.step = 0
        self.plan = make_plan(config.trainer.plan, config.trainer.plan_params)
        self.last: dict[str, float] = {}
        self.resumed_plan_state: Any = None
        """What the plan saved with the checkpoint this run resumed from (a prefetched batch, a buffer)."""
        resumed = on_compute_thread(load_checkpoint, self.c)
        if resumed is not None:
            self.step, self.resumed_plan_state = resumed
            self.c.run(self.sync_weights(version=self.step))
        if self.is_main:
            self.c.open_loggers(resume_step=resumed[0] if resumed else None)
        self.bar: Any = None

    # ---------------------------------------------------------------- the run
    def fit(self) -> dict[str, float]:
        cfg, c = self.cfg.trainer, self.c
        if self.step == 0 and cfg.eval_before_training and self.is_main:
            self.last.update(c.run(self.run_eval()))
        self.bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=not (cfg.progress_bar and self.is_main),
            desc=cfg.name,
            unit="step",
        )
        c.run(self.plan.run(self))
        self.bar.close()
        if cfg.export_final:
            on_compute_thread(c.export_policy)
        c.logger.close()
        c.settle()
        return self.last

    # ---------------------------------------------------------------- stages (what plans compose)
    async def generate_batch(self, step: int) -> Batch:
        """Draw a step's prompts and generate their groups (rank 0; other data-parallel ranks receive
        rank 0's groups). Failed trajectories leave their groups (too many stop the run); with
        dynamic sampling, refill dropped groups."""
        if not self.is_main:
            return Batch([], self.share_groups([]))
        algo = self.cfg.algorithm
        want = self.cfg.trainer.prompts_per_step
        rows = self.next_prompts()
        generated = await self._generate(rows, step, round_=0)
        groups, failed = drop_failed_trajectories(generated)
        count = sum(len(g.trajectories) for g in generated)
        stats: dict[str, float] = {}
        if algo.dynamic_sampling:
            # reward/mean covers the groups kept for training; this covers every sample drawn.
            drawn = [r for g in groups for r in g.rewards]
            kept, dropped = drop_zero_variance_groups(groups)
            rounds = 1
            while len(kept) < want and rounds < algo.max_sampling_rounds:
                more_rows = self.next_prompts()
                more_generated = await self._generate(more_rows, step, rounds)
                more_groups, more_failed = drop_failed_trajectories(more_generated)
                more, more_dropped = drop_zero_variance_groups(more_groups)
                drawn += [r for g in more_groups for r in g.rewards]
                kept += more
                failed += more_failed
                count += sum(len(g.trajectories) for g in more_generated)
                dropped += more_dropped
                rows += more_rows
                rounds += 1
            groups = kept[:want] if kept else groups  # never train on nothing: fall back to the raw batch
            stats = {"sampling/dropped_groups": float(dropped), "sampling/rounds": float(rounds)}
            if drawn:
                stats["sampling/drawn_reward_mean"] = sum(drawn) / len(drawn)
        self.check_failures(step, groups, failed, count)
        return Batch(rows, self.share_groups(self.shape_rewards(groups)), stats, failed)

    def next_prompts(self) -> list[Any]:
        """The next ``trainer.prompts_per_step`` dataset rows. The loader's cursor goes into every
        checkpoint (taken by ``end_step``), so a resumed run draws the rows the stopped one would have."""
        return self.c.loader.next_batch()

    def shape_rewards(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """Reward shaping that needs the whole trajectory (DAPO's soft overlong penalty)."""
        algo = self.cfg.algorithm
        if not algo.overlong_buffer_len:
            return groups
        budget = self.cfg.generator.max_new_tokens * self.cfg.generator.max_turns
        return apply_soft_overlong_penalty(
            groups, budget, algo.overlong_buffer_len, algo.overlong_penalty_factor
        )

    def sampling(self, temperature: float) -> SamplingParams:
        gen = self.cfg.generator
        return SamplingParams(
            max_tokens=gen.max_new_tokens,
            temperature=temperature,
            top_p=gen.top_p,
            top_k=gen.top_k,
            stop=gen.stop,
        )

    async def _generate(self, rows: list[Any], step: int, round_: int) -> list[TrajectoryGroup]:
        return await self.generate_groups(
            rows, seed=mix_seed(self.cfg.trainer.seed, step, round_), prefix=f"s{step}r{round_}g"
        )

    async def generate_groups(self, rows: list[Any], seed: int, prefix: str) -> list[TrajectoryGroup]:
        """``generator.n_samples`` trajectories for each row; ``seed`` fixes the sampling."""
        gen = self.cfg.generator
        assert self.c.generator is not None, "only the main rank generates"
        return await self.c.generator.generate(
            rows, n=gen.n_samples, sampling=self.sampling(gen.temperature), seed=seed, group_prefix=prefix
        )

    async def update(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        """Advantages and one policy (and critic) update on a step's groups (aloft.trainer.learner),
        in a worker thread, so that generation can go on meanwhile on this event loop."""

        def train() -> dict[str, float]:
            self.c.learners.enter_training()  # colocated on Ray: engines sleep, the learner's state comes back
            try:
                return self.c.learners.train_on(groups, step)
            finally:
                self.c.learners.enter_generation()

        return await asyncio.to_thread(train)

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        """The update alone, blocking (for tests and tools that drive the stages by hand)."""
        return self.c.learners.train_on(groups, step)

    def check_failures(
        self, step: int, groups: list[TrajectoryGroup], failed: list[Trajectory], generated: int
    ) -> None:
        """Stop the run when more than ``trainer.max_error_share`` of the ``generated`` trajectories
        failed (or every one did), writing the step's rollouts first so that the failures can be
        read (aloft.trainer.failures)."""
        path = self._rollouts_path(step)
        try:
            check_error_share(failed, generated, f"step {step}", self.cfg.trainer.max_error_share, str(path))
        except TooManyFailures:
            self._save_rollouts(groups, step, failed)
            raise

    def share_groups(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """Rank 0's rollouts on every data-parallel rank (each trains on its share of them)."""
        if self.c.world_size == 1:
            return groups
        box = [groups if self.is_main else None]
        on_compute_thread(lambda: dist.broadcast_object_list(box, src=0))  # collectives stay on one thread
        return box[0]

    async def sync_weights(
        self, version: int, probe: list[TrajectoryGroup] | None = None, in_flight: bool = False
    ) -> dict[str, float]:
        """Load the policy into the engines; with ``placement.verify_sync``, check the engine now
        samples with the trainer's logprobs (a probe completion of the first of ``probe``'s prompts).

        ``in_flight``: generation is running; engines pause (finish the batch they run, start no
        new one) while the weights load, and resume with them."""
        engine = self.c.engine if in_flight and self.is_main else None
        if engine is not None:
            await engine.pause()
        try:
            metrics = await self.c.learners.sync_weights(version)
        finally:
            if engine is not None:
                await engine.resume()
        if self.cfg.placement.verify_sync and probe is not None:
            metrics["sync/logprob_max_gap"] = await self.sync_gap(probe, version)
        return metrics

    async def sync_gap(self, groups: list[TrajectoryGroup], version: int) -> float:
        """Largest |engine sampler logprob - trainer logprob| on a fresh probe completion."""
        probe: list[TrajectoryGroup] = []
        if self.is_main:
            first = next(t for g in groups for t in g.trajectories if t.prompt_ids)
            sampling = self.sampling(self.cfg.generator.temperature)
            sampling.max_tokens, sampling.seed = min(sampling.max_tokens, 16), version
            request = GenerationRequest(prompt_ids=first.prompt_ids, sampling=sampling)
            [completion] = await self.c.engine.generate([request])
            trajectory = Trajectory(
                prompt_ids=first.prompt_ids,
                completion_ids=completion.token_ids,
                loss_mask=[1] * len(completion.token_ids),
                sampler_logprobs=completion.logprobs,
                rewards=[0.0] * len(completion.token_ids),
                status=RolloutStatus.STOP,
                group_id="sync-probe",
            )
            probe = [TrajectoryGroup(group_id="sync-probe", trajectories=[trajectory])]
        probe = self.share_groups(probe)  # every data-parallel rank takes part in the logprob pass
        return await asyncio.to_thread(self.c.learners.max_logprob_gap, probe[0].trajectories)

    async def end_step(
        self, step: int, batch: Batch, metrics: dict[str, float], plan_state: Any = None
    ) -> dict[str, float]:
        """Bookkeeping after step ``step``'s update and sync: metrics, rollouts, eval, checkpoint.
        ``plan_state`` (or a function returning it, called only when a checkpoint is written) goes
        into the checkpoint: what the plan needs to resume exactly."""
        cfg, c = self.cfg.trainer, self.c
        self.step = step
        trajectories = [t for g in batch.groups for t in g.trajectories]
        tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajectories)
        metrics = {
            **rollout_metrics(trajectories, batch.failed),
            **staleness_metrics(trajectories, version=step - 1),
            **batch.stats,
            **metrics,
            "throughput/tokens_per_s": tokens / max(metrics.get("timing/step_s", 0.0), 1e-9),
            "policy_version": float(step),
        }
        c.logger.log(metrics, step)
        if cfg.save_rollouts and self.is_main:
            self._save_rollouts(batch.groups, step, batch.failed, trained=True)
        self.last.update(metrics)
        if (cfg.eval_every and step % cfg.eval_every == 0 or step == cfg.max_steps) and self.is_main:
            self.last.update(await self.run_eval())
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
            # The plan's state and the loader's cursor are taken together, here on the event loop
            # (an asynchronous plan's producer draws prompts on it), then written from a thread.
            state = plan_state() if callable(plan_state) else plan_state
            loader = c.loader.state_dict()
            await asyncio.to_thread(on_compute_thread, save_checkpoint, c, step, state, loader)
        self.bar.update(1)
        self.bar.set_postfix(
            reward=f"{metrics.get('reward/mean', float('nan')):.3f}",
            eval=f"{self.last.get('eval/reward/mean', float('nan')):.3f}",
        )
        return metrics

    async def run_eval(self) -> dict[str, float]:
        c, gen = self.c, self.cfg.generator
        if not c.eval_rows:
            return {}
        t0 = time.perf_counter()
        metrics, groups = await evaluate(
            c.generator,
            c.eval_rows,
            n=gen.eval_n_samples,
            sampling=self.sampling(gen.eval_temperature),
            seed=self.cfg.trainer.seed + 10_007,
        )
        _, failed = drop_failed_trajectories(groups)  # an eval that mostly failed measures nothing
        generated = sum(len(g.trajectories) for g in groups)
        check_error_share(
            failed, generated, f"the eval at step {self.step}", self.cfg.trainer.max_error_share
        )
        metrics["timing/eval_s"] = time.perf_counter() - t0
        c.logger.log(metrics, self.step)
        return metrics

    def _rollouts_path(self, step: int) -> Path:
        return self.c.run_dir / "rollouts" / f"step_{step}.jsonl"

    def _save_rollouts(
        self, groups: list[TrajectoryGroup], step: int, failed: list[Trajectory], trained: bool = False
    ) -> None:
        """The step's trajectories (at most ``trainer.rollouts_per_step``, whole groups first), then
        the failed ones with their errors. ``trained``: the update ran, so each trajectory also gets
        the advantage and trainer logprobs it was trained with."""
        path = self._rollouts_path(step)
        path.parent.mkdir(parents=True, exist_ok=True)
        decode = self.c.tokenizer.decode
        used = self.c.learners.trained_tokens() if trained else {}
        limit = self.cfg.trainer.rollouts_per_step or None
        kept: list[tuple[Trajectory, dict[str, Any]]] = []
        for g in groups:
            if limit and kept and len(kept) + len(g.trajectories) > limit:
                break
            kept += [(t, used.get(f"{g.group_id}/{k}", {})) for k, t in enumerate(g.trajectories)]
        kept = kept[:limit]  # a first group larger than the limit is cut
        with path.open("w") as f:
            for t, extra in [*kept, *((t, {}) for t in failed)]:
                f.write(json.dumps({**rollout_record(t, decode), **extra}) + "\n")


def rollout_record(t: Trajectory, decode: Any) -> dict[str, Any]:
    """A trajectory as one line of a rollouts file: the decoded prompt and completion, then every
    field of the trajectory (token ids, loss mask, logprobs, rewards, status, info with any error).
    Logprobs are rounded to 1e-6 (float32 values printed in full take twice the bytes): the file is
    for reading, resumes never read it."""
    record = {"prompt": decode(t.prompt_ids), "completion": decode(t.completion_ids), **t.to_json()}
    record["sampler_logprobs"] = [round(x, 6) for x in t.sampler_logprobs]
    return record


def train(config: AloftConfig) -> dict[str, float]:
    """Run (or resume) a training run; returns the last step's and last eval's metrics.

    With a data-parallel ``trainer.strategy`` and no process group yet, starts
    ``trainer.num_processes`` ranks on this machine (a gloo group on 127.0.0.1) and returns rank 0's
    metrics; under ``torchrun`` (a group exists) every process runs its own rank. With
    ``placement.backend=ray`` this process drives and the ranks are Ray actors (aloft.placement).
    """
    local_ranks = config.placement.backend == "local" and config.trainer.strategy != "single"
    if local_ranks and not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return _train_on_local_ranks(config)
        # Started by torchrun (or another launcher that sets RANK / WORLD_SIZE / MASTER_ADDR).
        device = _rank_device(config, None)
        use_device(device)
        dist.init_process_group(process_group_backend(device, config.trainer.fsdp_cpu_offload))
        try:
            return train(config)
        finally:
            dist.destroy_process_group()
    trainer = Trainer(config)
    try:
        return trainer.fit()
    finally:
        trainer.c.close()


def _train_on_local_ranks(config: AloftConfig) -> dict[str, float]:
    import torch.multiprocessing as mp

    from aloft.distributed import free_loopback_port

    results = mp.get_context("spawn").SimpleQueue()
    ranks = config.trainer.num_processes
    _rank_device(config, ranks - 1)  # one GPU per rank: the last rank's must exist
    try:
        mp.spawn(_local_rank, args=(config, ranks, free_loopback_port(), results), nprocs=ranks)
    except mp.ProcessRaisedException:
        # spawn has ended the other ranks; a rank's one-line stop (a config error, too many failed
        # trajectories) is raised here as itself, not as a child's traceback.
        first = None if results.empty() else results.get()
        if isinstance(first, Exception):
            raise first from None
        raise
    return results.get()


def _local_rank(rank: int, config: AloftConfig, ranks: int, port: int, results: Any) -> None:
    from aloft.distributed import init_loopback_group, leave_spawned_rank

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))  # the ranks share this machine's cores
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun sets it (DeepSpeed reads it)
    # Ranks other than 0 wait in a collective while rank 0 generates and evaluates: allow it the
    # time a rollout or an eval can take (torch's default for gloo), not init_loopback_group's 2 minutes.
    device = _rank_device(config, rank)
    use_device(device)  # NCCL binds each rank to its current GPU
    backend = process_group_backend(device, config.trainer.fsdp_cpu_offload)
    init_loopback_group(rank, ranks, port, backend=backend, timeout_s=1800)
    try:
        metrics = train(config)
        if rank == 0:
            results.put(metrics)
    except (ConfigError, TooManyFailures) as stop:
        results.put(stop)  # for the parent to raise as the run's one line (_train_on_local_ranks)
        raise
    finally:
        dist.destroy_process_group()
    leave_spawned_rank()  # the result is handed over (results.put writes through)


def _rank_device(config: AloftConfig, local_rank: int | None) -> torch.device:
    """The device of a local rank (None: the one ``LOCAL_RANK`` names), or the run's one-line stop."""
    try:
        return resolve_device(config.trainer.device, local_rank)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def run_dir_of(config: AloftConfig) -> Path:
    return Path(config.trainer.run_root) / config.trainer.name
