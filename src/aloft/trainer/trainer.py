"""The synchronous RL loop (DESIGN.md §1), top to bottom.

    for step in 1..max_steps:
        rows          <- loader.next_batch()                      prompts (cursor is checkpointed)
        groups        <- generator(rows, n)                       trajectories, rewards (engine + envs)
        batch         <- collate(groups)                          [B, P+T] tensors, loss_mask
        old, ref, V   <- policy / reference / critic forward       (skipped when not needed)
        A, returns    <- advantage_estimator(rewards, mask, groups, V)
        policy.update(batch, A); critic.update(batch, returns)    clipped policy loss, value loss
        engine.update_weights(policy weights, version=step)       weight sync
        log metrics; eval every N steps; checkpoint every N steps

Execution plans that overlap generation and training (one-step-off, fully async) reuse these same
pieces: ``rollout``, ``train_on`` and ``sync_weights`` are separate methods for that reason. Where the
workers and engines run (this process, local ranks, Ray actors) is behind ``Components.learners``
and ``Components.engine``; the loop is the same for all of them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from aloft.algorithms import apply_soft_overlong_penalty, drop_zero_variance_groups
from aloft.config import AloftConfig
from aloft.models.compute_thread import on_compute_thread
from aloft.rollout.generator import _mix
from aloft.trainer.components import Components, build_components
from aloft.trainer.evaluation import evaluate
from aloft.trainer.resume import load_checkpoint, save_checkpoint
from aloft.trainer.step_metrics import rollout_metrics
from aloft.types import GenerationRequest, RolloutStatus, SamplingParams, Trajectory, TrajectoryGroup


@dataclass
class StepResult:
    metrics: dict[str, float]
    groups: list[TrajectoryGroup]


class Trainer:
    """Owns a run directory and runs the synchronous plan; rerunning it resumes."""

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
        resumed = on_compute_thread(load_checkpoint, self.c)
        if resumed is not None:
            self.step = resumed
            self.sync_weights(version=self.step)
        if self.is_main:
            self.c.open_loggers(resume_step=resumed)

    # ---------------------------------------------------------------- the loop
    def fit(self) -> dict[str, float]:
        cfg, c = self.cfg.trainer, self.c
        last: dict[str, float] = {}
        if self.step == 0 and cfg.eval_before_training and self.is_main:
            last.update(self.run_eval())
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=not (cfg.progress_bar and self.is_main),
            desc=cfg.name,
            unit="step",
        )
        while self.step < cfg.max_steps:
            self.step += 1
            t0 = time.perf_counter()

            rows, groups, sampling_stats = self.rollout(self.step) if self.is_main else ([], [], {})
            groups = self.share_groups(groups)
            t_gen = time.perf_counter()

            c.learners.enter_training()  # colocated on Ray: engines sleep, the learner's state comes back
            train_metrics = self.train_on(groups, self.step)
            c.learners.enter_generation()
            t_train = time.perf_counter()

            sync_metrics = self.sync_weights(version=self.step, probe=groups)
            t_sync = time.perf_counter()

            trajectories = [t for g in groups for t in g.trajectories]
            tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajectories)
            metrics = {
                **rollout_metrics(trajectories),
                **sampling_stats,
                **train_metrics,
                **sync_metrics,
                "timing/step_s": t_sync - t0,
                "timing/generate_s": t_gen - t0,
                "timing/train_s": t_train - t_gen,
                "timing/sync_s": t_sync - t_train,
                "throughput/tokens_per_s": tokens / (t_sync - t0),
                "policy_version": float(self.step),
            }
            c.logger.log(metrics, self.step)
            if cfg.save_rollouts and self.is_main:
                self._save_rollouts(groups)
            last.update(metrics)
            if (
                cfg.eval_every and self.step % cfg.eval_every == 0 or self.step == cfg.max_steps
            ) and self.is_main:
                last.update(self.run_eval())
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 or self.step == cfg.max_steps:
                on_compute_thread(save_checkpoint, c, self.step)
            bar.update(1)
            bar.set_postfix(
                reward=f"{metrics['reward/mean']:.3f}",
                eval=f"{last.get('eval/reward/mean', float('nan')):.3f}",
            )
        bar.close()
        if cfg.export_final:
            on_compute_thread(c.export_policy)
        c.logger.close()
        c.settle()
        return last

    # ---------------------------------------------------------------- stages
    def rollout(self, step: int) -> tuple[list[Any], list[TrajectoryGroup], dict[str, float]]:
        """Sample prompts and generate their groups; with dynamic sampling, refill dropped groups."""
        algo, c = self.cfg.algorithm, self.c
        want = self.cfg.trainer.prompts_per_step
        rows = c.loader.next_batch()
        groups = self._generate(rows, step, round_=0)
        stats: dict[str, float] = {}
        if algo.dynamic_sampling:
            kept, dropped = drop_zero_variance_groups(groups)
            rounds = 1
            while len(kept) < want and rounds < algo.max_sampling_rounds:
                more_rows = c.loader.next_batch()
                more, more_dropped = drop_zero_variance_groups(self._generate(more_rows, step, round_=rounds))
                kept += more
                dropped += more_dropped
                rows += more_rows
                rounds += 1
            groups = kept[:want] if kept else groups  # never train on nothing: fall back to the raw batch
            stats = {"sampling/dropped_groups": float(dropped), "sampling/rounds": float(rounds)}
        if algo.overlong_buffer_len:
            groups = apply_soft_overlong_penalty(
                groups,
                self.cfg.generator.max_new_tokens * self.cfg.generator.max_turns,
                algo.overlong_buffer_len,
                algo.overlong_penalty_factor,
            )
        return rows, groups, stats

    def _sampling(self, temperature: float) -> SamplingParams:
        gen = self.cfg.generator
        return SamplingParams(
            max_tokens=gen.max_new_tokens,
            temperature=temperature,
            top_p=gen.top_p,
            top_k=gen.top_k,
            stop=gen.stop,
        )

    def _generate(self, rows: list[Any], step: int, round_: int) -> list[TrajectoryGroup]:
        gen = self.cfg.generator
        sampling = self._sampling(gen.temperature)
        seed = _mix(self.cfg.trainer.seed, step, round_)
        return self.c.run(
            self.c.generator.generate(
                rows, n=gen.n_samples, sampling=sampling, seed=seed, group_prefix=f"s{step}r{round_}g"
            )
        )

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        """Advantages and one policy (and critic) update on a step's groups (aloft.trainer.learner)."""
        return self.c.learners.train_on(groups, step)

    def share_groups(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """Rank 0's rollouts on every data-parallel rank (each trains on its share of them)."""
        if self.c.world_size == 1:
            return groups
        box = [groups if self.is_main else None]
        on_compute_thread(lambda: dist.broadcast_object_list(box, src=0))  # collectives stay on one thread
        return box[0]

    def sync_weights(self, version: int, probe: list[TrajectoryGroup] | None = None) -> dict[str, float]:
        """Load the policy into the engines; with ``placement.verify_sync``, check the engine now
        samples with the trainer's logprobs (a probe completion of the first of ``probe``'s prompts)."""
        metrics = self.c.learners.sync_weights(version)
        if self.cfg.placement.verify_sync and probe is not None:
            metrics["sync/logprob_max_gap"] = self._sync_gap(probe, version)
        return metrics

    def _sync_gap(self, groups: list[TrajectoryGroup], version: int) -> float:
        probe: list[TrajectoryGroup] = []
        if self.is_main:
            first = next(t for g in groups for t in g.trajectories if t.prompt_ids)
            sampling = self._sampling(self.cfg.generator.temperature)
            sampling.max_tokens, sampling.seed = min(sampling.max_tokens, 16), version
            [completion] = self.c.run(
                self.c.engine.generate([GenerationRequest(prompt_ids=first.prompt_ids, sampling=sampling)])
            )
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
        return self.c.learners.max_logprob_gap(probe[0].trajectories)

    def run_eval(self) -> dict[str, float]:
        c, gen = self.c, self.cfg.generator
        if not c.eval_rows:
            return {}
        t0 = time.perf_counter()
        sampling = self._sampling(gen.eval_temperature)
        metrics, _ = self.c.run(
            evaluate(
                c.generator,
                c.eval_rows,
                n=gen.eval_n_samples,
                sampling=sampling,
                seed=self.cfg.trainer.seed + 10_007,
            )
        )
        metrics["timing/eval_s"] = time.perf_counter() - t0
        c.logger.log(metrics, self.step)
        return metrics

    def _save_rollouts(self, groups: list[TrajectoryGroup]) -> None:
        path = self.c.run_dir / "rollouts" / f"step_{self.step}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        decode = self.c.tokenizer.decode
        with path.open("w") as f:
            for g in groups:
                for t in g.trajectories:
                    f.write(json.dumps(_rollout_record(t, decode)) + "\n")


def _rollout_record(t: Trajectory, decode: Any) -> dict[str, Any]:
    return {"prompt": decode(t.prompt_ids), "completion": decode(t.completion_ids), **t.to_json()}


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
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
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
    mp.spawn(_local_rank, args=(config, ranks, free_loopback_port(), results), nprocs=ranks)
    return results.get()


def _local_rank(rank: int, config: AloftConfig, ranks: int, port: int, results: Any) -> None:
    from aloft.distributed import init_loopback_group

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))  # the ranks share this machine's cores
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun sets it (DeepSpeed reads it)
    # Ranks other than 0 wait in a collective while rank 0 generates and evaluates: allow it the
    # time a rollout or an eval can take (torch's default for gloo), not init_loopback_group's 2 minutes.
    init_loopback_group(rank, ranks, port, timeout_s=1800)
    try:
        metrics = train(config)
        if rank == 0:
            results.put(metrics)
    finally:
        dist.destroy_process_group()


def run_dir_of(config: AloftConfig) -> Path:
    return Path(config.trainer.run_root) / config.trainer.name
