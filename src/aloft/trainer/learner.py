"""The training side of a run: the policy (and reference, critic) workers and one step's update.

Every training process owns one ``Learner``: the trainer's own process (``placement.backend=local``,
one per data-parallel rank) or a Ray actor (``placement.backend=ray``, aloft.placement). The driver
never touches the workers directly; it hands a step's trajectory groups to ``train_on`` and asks for
weights, checkpoints and exports. Under a data-parallel strategy every method here is a collective:
all ranks call it with the same arguments.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from aloft.algorithms import (
    apply_kl_penalty_to_rewards,
    drop_failed_trajectories,
    get_advantage_estimator,
    kl_divergence,
    off_policy_weights,
    overlong_filter_mask,
)
from aloft.config import AloftConfig
from aloft.inference.base import InferenceEngine, supports_lora_sync
from aloft.models import load_tokenizer, resolve_model_path
from aloft.models.compat import plain_causal_attention
from aloft.models.compute_thread import on_compute_thread
from aloft.models.device import free_cached_memory, resolve_device, use_device
from aloft.models.precision import bf16_autocast_choice
from aloft.seeds import mix_seed
from aloft.trainer.sessions import SESSION_ESTIMATORS, session_leads, shared_session_advantages
from aloft.trainer.step_metrics import env_token_share, sampler_logprob_diff
from aloft.trainer.update_size import ZERO_ON_POLICY, UpdateProbe
from aloft.training import CriticWorker, OptimSettings, PolicyWorker, ReferenceWorker, TrainBatch, collate
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS
from aloft.training.lora import base_fingerprint
from aloft.training.lora_checkpoint import with_saved_adapters, write_adapter_checkpoint
from aloft.training.strategies import FSDP2, DeepSpeedZeRO, Strategy
from aloft.training.ulysses import Ulysses
from aloft.types import Trajectory, TrajectoryGroup


@dataclass
class Learner:
    cfg: AloftConfig
    policy: PolicyWorker
    reference: ReferenceWorker | None
    critic: CriticWorker | None
    pad_token_id: int
    trained: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the last update trained each trajectory with (see ``trained_tokens``)."""
    base_norms: dict[str, list[float]] | None = field(default=None, repr=False)
    """A LoRA policy's ``base_fingerprint``, once taken (``write_state``)."""

    @property
    def rank(self) -> int:
        return self.policy.strategy.rank

    # ---------------------------------------------------------------- one step
    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        """Advantages and one policy (and critic) update on a step's groups. Failed trajectories
        (the env or the engine raised) are left out, exactly as if never drawn."""
        algo = self.cfg.algorithm
        groups, _ = drop_failed_trajectories(groups)
        trajectories = [t for g in groups for t in g.trajectories if t.prompt_ids]
        group_index = {g.group_id: i for i, g in enumerate(groups)}
        batch = collate(trajectories, self.pad_token_id, group_index)
        if algo.overlong_filter:
            keep = torch.tensor(overlong_filter_mask(trajectories), dtype=torch.float32)
            batch.loss_mask *= keep[:, None]
        metrics: dict[str, float] = {"mask/env_token_share": env_token_share(trajectories, batch)}

        on_policy = algo.ppo_epochs == 1 and algo.mini_batches == 1
        correct = algo.off_policy_correction != "none"
        need_old = not on_policy or correct or (algo.kl_coef > 0 and algo.kl_penalty == "reward")
        old_logprobs = self.policy.compute_logprobs(batch) if need_old else None
        ref_logprobs = self.reference.compute_logprobs(batch) if self.reference is not None else None
        values = self.critic.compute_values(batch) if self.critic is not None else None
        if old_logprobs is not None:
            metrics["logprob/sampler_abs_diff"] = sampler_logprob_diff(old_logprobs, batch)

        rewards = batch.rewards
        if ref_logprobs is not None:
            current = old_logprobs if old_logprobs is not None else batch.sampler_logprobs
            metrics["policy/kl_to_ref"] = _masked_mean(
                kl_divergence(current, ref_logprobs, "k1"), batch.loss_mask
            )
            if algo.kl_penalty == "reward":
                rewards = apply_kl_penalty_to_rewards(
                    rewards,
                    current,
                    ref_logprobs,
                    batch.loss_mask,
                    algo.kl_coef,
                    algo.kl_estimator,
                    algo.kl_clamp,
                )
        estimator = get_advantage_estimator(algo.advantage)
        advantages, returns = estimator(rewards, batch.loss_mask, batch.group_ids, values, algo)
        leads = session_leads(trajectories) if algo.advantage in SESSION_ESTIMATORS else None
        if leads is not None:  # forked agent sessions weigh one sample each (aloft.trainer.sessions)
            advantages = shared_session_advantages(
                estimator, rewards, batch.loss_mask, batch.group_ids, algo, leads
            )
        if correct:  # samples from an older policy: importance-weight their advantages
            assert old_logprobs is not None
            weights, correction_metrics = off_policy_weights(
                old_logprobs,
                batch.sampler_logprobs,
                batch.loss_mask,
                algo.off_policy_correction,
                cap=algo.tis_cap,
                low=algo.geo_mask_low,
                high=algo.geo_mask_high,
            )
            advantages = advantages * weights
            metrics.update(correction_metrics)
        metrics["advantage/mean"] = _masked_mean(advantages, batch.loss_mask)
        metrics["advantage/abs_mean"] = _masked_mean(advantages.abs(), batch.loss_mask)

        max_len = self.cfg.generator.max_total_tokens
        trainer = self.cfg.trainer
        probe = UpdateProbe(
            self.policy,
            batch,
            old_logprobs,
            kl_rows=trainer.update_kl_rows,
            rel_norm=trainer.update_rel_norm,
        )
        for epoch in range(algo.ppo_epochs):
            mini_batches = self._mini_batches(batch, len(groups), step, epoch)
            policy_metrics = self.policy.update(
                batch,
                advantages,
                algo,
                old_logprobs=old_logprobs,
                ref_logprobs=ref_logprobs,
                mini_batches=mini_batches,
                max_len=max_len,
            )
            if self.critic is not None and values is not None:
                policy_metrics.update(
                    self.critic.update(batch, values, returns, algo.value_clip, mini_batches)
                )
            if epoch == 0:
                metrics.update(policy_metrics)
        metrics.update(probe.finish())
        if on_policy:  # the ratio is 1 by construction: these say nothing (aloft.trainer.update_size)
            for name in ZERO_ON_POLICY:
                metrics.pop(name, None)
        metrics["train/policy_tokens"] = float(batch.loss_mask.sum())
        if self.cfg.trainer.save_rollouts:  # what the rollouts file records next to each trajectory
            trainer_logprobs = old_logprobs if old_logprobs is not None else self.policy.update_logprobs
            self.trained = trained_tokens(groups, batch, advantages, trainer_logprobs)
        return metrics

    def _mini_batches(self, batch: TrainBatch, num_groups: int, step: int, epoch: int) -> list[list[int]]:
        """Row indices per mini-batch for this epoch (see ``group_mini_batches``)."""
        seed = mix_seed(self.cfg.trainer.seed, step, epoch)
        return group_mini_batches(batch.group_ids, num_groups, self.cfg.algorithm.mini_batches, seed)

    # ---------------------------------------------------------------- weights and state
    def named_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The policy's weights under HF names, for the engines (gathered in full: a collective)."""
        return list(self.policy.named_weights())

    def max_logprob_gap(self, trajectories: list[Trajectory]) -> float:
        """Largest |trainer logprob - sampler logprob| over the trajectories' policy tokens: ~0 when
        the engine that sampled them holds exactly the trainer's weights (the weight-sync check)."""
        batch = collate(trajectories, self.pad_token_id, {t.group_id: 0 for t in trajectories})
        offloaded = self.policy.offloaded  # colocated: the check runs while the engine has the device
        if offloaded:
            self.move_to(self.policy.device)
        try:
            logprobs = self.policy.compute_logprobs(batch)
        finally:
            if offloaded:
                self.move_to("cpu")
        return float(((logprobs - batch.sampler_logprobs).abs() * batch.loss_mask).max())

    def write_state(self, directory: Path | None) -> None:
        """Write weights and optimizer state into ``directory`` (rank 0; other ranks pass None but
        must call too, gathering is a collective). A LoRA policy writes its adapters alone
        (``policy_adapter.safetensors``, with the norms of the frozen base it trains on, a few MB
        instead of the whole model); a full policy, every weight (``policy.safetensors``)."""
        policy, policy_optim = self.policy.full_state_dict(), self.policy.optim_state_dict()
        if directory is None or self.rank != 0:
            return
        if self.policy.lora:
            self.base_norms = self.base_norms or base_fingerprint(policy)  # the base is frozen: once
            write_adapter_checkpoint(directory / POLICY_ADAPTERS, policy, self.base_norms)
        else:
            save_file(_contiguous(policy), directory / POLICY_WEIGHTS)
        torch.save(policy_optim, directory / "policy_optim.pt")
        if self.critic is not None:
            save_file(_contiguous(self.critic.model.state_dict()), directory / "critic.safetensors")
            torch.save(self.critic.optim_state_dict(), directory / "critic_optim.pt")

    def read_state(self, directory: Path) -> None:
        """Restore ``write_state``'s files, from a run on any device (optimizer state is read into CPU
        memory, and the optimizers move it to their parameters' device). An adapter-only checkpoint
        goes onto the base this run loaded from ``model.path``, which must be the one it trained on."""
        if (directory / POLICY_ADAPTERS).exists():
            state = self.policy.full_state_dict()  # a collective under FSDP2: every rank calls it
            self.base_norms = self.base_norms or base_fingerprint(state)
            path = directory / POLICY_ADAPTERS
            self.policy.load_full_state_dict(
                with_saved_adapters(path, state, self.base_norms, self.cfg.model.path)
            )
        else:
            self.policy.load_full_state_dict(load_file(directory / POLICY_WEIGHTS))
        self.policy.load_optim_state_dict(
            torch.load(directory / "policy_optim.pt", weights_only=False, map_location="cpu")
        )
        if self.critic is not None:
            self.critic.model.load_state_dict(load_file(directory / "critic.safetensors"))
            self.critic.load_optim_state_dict(
                torch.load(directory / "critic_optim.pt", weights_only=False, map_location="cpu")
            )

    def save_pretrained(self, directory: Path | None) -> None:
        """The policy in HF format (LoRA merged) into ``directory`` (rank 0; a collective)."""
        state = self.policy.full_state_dict()  # a collective under FSDP2: every rank gathers
        if directory is not None and self.rank == 0:
            self.policy.save_pretrained(str(directory), state_dict=state)

    def move_to(self, device: str | torch.device) -> None:
        """Models, gradients and optimizer states to ``device``: colocated placement moves them to
        the CPU while the engines generate, and back for the update."""
        for worker in (self.policy, self.critic):
            if worker is not None:
                worker.move_to(device)
        if self.reference is not None:
            self.reference.model.to(device)
        free_cached_memory(self.policy.device)  # what the moves freed goes back to the GPU


class Learners(Protocol):
    """The driver's handle on a run's training processes (this process, or Ray actors).

    Every call reaches every training process (under FSDP2 they are collectives) and returns the
    main rank's answer; the trainer loop is written against this and nothing else."""

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]: ...

    async def sync_weights(self, version: int) -> dict[str, float]:
        """Load the policy's current weights into the run's engines as ``version``; sync metrics."""
        ...

    def max_logprob_gap(self, trajectories: list[Trajectory]) -> float: ...

    def trained_tokens(self) -> dict[str, dict[str, Any]]:
        """Per trajectory of the last update: its advantage and the trainer's logprobs (main rank)."""
        ...

    def write_state(self, directory: Path | None) -> None: ...

    def read_state(self, directory: Path) -> None: ...

    def save_pretrained(self, directory: Path | None) -> None: ...

    def enter_training(self) -> None:
        """Before an update: colocated placements put the engines to sleep and bring the learner back."""
        ...

    def enter_generation(self) -> None:
        """After an update: colocated placements offload the learner and wake the engines."""
        ...


class LocalLearners:
    """``Learners`` for ``placement.backend=local``: this process's ``Learner`` (one data-parallel
    rank of ``trainer.num_processes``), run on the compute thread, and rank 0's engine.

    ``swap``: the learner and the engine share a GPU and take turns, as colocated Ray actors do:
    the engine sleeps (frees its weights' and KV cache's memory) while the learner trains, and the
    learner's weights and optimizer state wait in CPU memory while the engine generates. The
    engine's calls run on ``loop``, the event loop it generates on.
    """

    def __init__(
        self,
        learner: Learner,
        engine: InferenceEngine | None,
        *,
        swap: bool = False,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if swap and (engine is None or loop is None):
            raise ValueError("LocalLearners(swap=True) needs the engine and the event loop it runs on")
        self.learner, self.engine, self.swap, self.loop = learner, engine, swap, loop

    def train_on(self, groups: list[TrajectoryGroup], step: int) -> dict[str, float]:
        return on_compute_thread(self.learner.train_on, groups, step)

    async def sync_weights(self, version: int) -> dict[str, float]:
        # A LoRA policy sends its adapters alone to an engine that merges them itself (~1% of the
        # bytes); otherwise every rank gathers the full weights (a LoRA merge is math) and rank 0's
        # engine loads them. Ranks without an engine take the second branch: either branch gathers
        # the full state exactly once (a collective under FSDP2), so the ranks stay in step.
        policy, engine = self.learner.policy, self.engine
        if policy.lora and self.learner.cfg.placement.lora_sync == "adapter" and supports_lora_sync(engine):
            adapters = await asyncio.to_thread(on_compute_thread, policy.lora_adapters)
            await engine.update_lora(adapters, version)  # type: ignore[union-attr]
            return {"sync/bytes": float(adapters.nbytes)}
        weights = await asyncio.to_thread(on_compute_thread, self.learner.named_weights)
        if engine is not None:
            await engine.update_weights(weights, version)
        return {"sync/bytes": float(sum(tensor.nbytes for _, tensor in weights))}

    def max_logprob_gap(self, trajectories: list[Trajectory]) -> float:
        return on_compute_thread(self.learner.max_logprob_gap, trajectories)

    def trained_tokens(self) -> dict[str, dict[str, Any]]:
        return self.learner.trained

    def write_state(self, directory: Path | None) -> None:
        on_compute_thread(self.learner.write_state, directory)

    def read_state(self, directory: Path) -> None:
        on_compute_thread(self.learner.read_state, directory)

    def save_pretrained(self, directory: Path | None) -> None:
        on_compute_thread(self.learner.save_pretrained, directory)

    def enter_training(self) -> None:
        """Swapping: the engine sleeps, the learner's state comes back to its device."""
        if self.swap:
            self._on_engine_loop("sleep")
            on_compute_thread(self.learner.move_to, self.learner.policy.device)

    def enter_generation(self) -> None:
        """Swapping: the learner's state goes to CPU memory, the engine wakes to generate."""
        if self.swap:
            on_compute_thread(self.learner.move_to, "cpu")
            self._on_engine_loop("wake_up")

    def _on_engine_loop(self, method: str) -> None:
        # Called from the update's worker thread while the loop runs the generator.
        assert self.engine is not None and self.loop is not None
        asyncio.run_coroutine_threadsafe(getattr(self.engine, method)(), self.loop).result()


def build_learner(cfg: AloftConfig) -> Learner:
    """The workers of ``cfg``; under a data-parallel ``trainer.strategy`` the process group must exist."""
    for module in cfg.trainer.imports:  # user plugins may register estimators and losses
        importlib.import_module(module)
    tr, gen, optim, algo = cfg.trainer, cfg.generator, cfg.optim, cfg.algorithm
    device = resolve_device(tr.device)
    # This rank's GPU is the current one (NCCL, FSDP2's mesh and streams), on this thread and on the
    # compute thread that runs the updates (CUDA's current device is per thread).
    use_device(device)
    on_compute_thread(use_device, device)
    strategies: dict[str, Callable[[], Strategy]] = {
        "fsdp2": lambda: FSDP2(
            mixed_precision=tr.fsdp_mixed_precision, cpu_offload=tr.fsdp_cpu_offload, device=device
        ),
        "ulysses": Ulysses,
        "deepspeed": lambda: DeepSpeedZeRO(tr.zero_stage),
    }
    strategy = strategies[tr.strategy]() if tr.strategy != "single" else None
    model_path = resolve_model_path(cfg.model.path)
    tokenizer = load_tokenizer(model_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    autocast = bf16_autocast_choice(optim.bf16_autocast, device)
    # auto: packed rows wherever they reproduce the model's attention (ulysses always packs, and
    # refuses a model whose attention packing cannot reproduce).
    packing = optim.packing
    if packing == "auto":
        packing = tr.strategy == "ulysses" or plain_causal_attention(AutoConfig.from_pretrained(model_path))
    optimizer_steps = tr.max_steps * algo.ppo_epochs * algo.mini_batches
    policy = PolicyWorker(
        model_path,
        OptimSettings(
            lr=optim.lr,
            weight_decay=optim.weight_decay,
            betas=optim.betas,
            warmup_steps=optim.warmup_steps,
            schedule=optim.schedule,
            total_steps=optimizer_steps,
            max_grad_norm=optim.max_grad_norm,
            micro_batch_size=optim.micro_batch_size,
            bf16_autocast=autocast,
            share_prompts=optim.share_prompts,
            packing=packing,
            micro_batch_tokens=optim.micro_batch_tokens,
            min_shared_prefix=optim.min_shared_prefix if optim.share_prompts else 0,
        ),
        temperature=gen.temperature,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        lora={
            "r": cfg.model.lora_rank,
            "alpha": cfg.model.lora_alpha,
            "target_modules": cfg.model.lora_target_modules,
        },
        strategy=strategy,
        device=device,
    )
    reference = None
    if algo.kl_coef > 0:
        reference = ReferenceWorker(
            model_path,
            temperature=gen.temperature,
            micro_batching=policy.settings.micro_batching,
            bf16_autocast=autocast,
            lora_policy=policy.model if policy.lora else None,  # the base under the adapters: no copy
            device=device,
        )
    critic = None
    if cfg.critic.enabled:
        critic = CriticWorker(
            resolve_model_path(cfg.critic.path or cfg.model.path),
            OptimSettings(
                lr=cfg.critic.lr,
                total_steps=optimizer_steps,
                max_grad_norm=optim.max_grad_norm,
                micro_batch_size=optim.micro_batch_size,
                bf16_autocast=autocast,
            ),
            device=device,
        )
    return Learner(cfg=cfg, policy=policy, reference=reference, critic=critic, pad_token_id=int(pad))


def group_mini_batches(group_ids: torch.Tensor, num_groups: int, n: int, seed: int) -> list[list[int]]:
    """Split a step's rows into ``n`` mini-batches of whole groups, every group in exactly one.

    ``group_ids`` is ``[B]`` (each row's group index in ``0..num_groups-1``). Groups are shuffled by
    ``seed`` (one order per step and epoch), then dealt out as evenly as the count allows: 7 groups
    in 2 mini-batches are 4 + 3, never 3 + 3 with one left out. The counts vary from step to step
    (failed trajectories leave their group, dynamic sampling keeps only groups with variance), so no
    divisibility can be assumed. Fewer groups than ``n`` give fewer, one-group mini-batches. Each
    mini-batch's loss is normalized over its own tokens (``LossNormalizer`` in the worker).
    """
    if n == 1:
        return [list(range(len(group_ids)))]
    order = torch.randperm(num_groups, generator=torch.Generator().manual_seed(seed))
    out = []
    for chunk in torch.tensor_split(order, n):
        chosen = set(chunk.tolist())
        rows = [i for i in range(len(group_ids)) if int(group_ids[i]) in chosen]
        if rows:
            out.append(rows)
    return out


def trained_tokens(
    groups: list[TrajectoryGroup],
    batch: TrainBatch,
    advantages: torch.Tensor,
    trainer_logprobs: torch.Tensor | None,
) -> dict[str, dict[str, Any]]:
    """Per trajectory (``"<group_id>/<index in group>"``, the batch's row order), what the update
    used on its trained tokens: ``advantage`` (one number when every trained token has the same, as
    under group baselines; else one per completion token, 0 where not trained) and
    ``trainer_logprobs`` (the trainer's pre-update logprob of each completion token; None where this
    rank did not compute the row). Rounded (1e-4, 1e-6): they are for reading, not for resuming."""
    out: dict[str, dict[str, Any]] = {}
    row = 0
    for group in groups:
        for index, trajectory in enumerate(group.trajectories):
            if not trajectory.prompt_ids:
                continue
            width = len(trajectory.completion_ids)
            mask = batch.loss_mask[row, :width].bool()
            advantage = advantages[row, :width].float()
            trained = advantage[mask]
            if trained.numel() and bool((trained == trained[0]).all()):
                adv: Any = round(float(trained[0]), 4)
            else:
                adv = [round(float(a), 4) if m else 0.0 for a, m in zip(advantage, mask, strict=True)]
            logprobs = None
            if trainer_logprobs is not None and not bool(trainer_logprobs[row, :width][mask].isnan().any()):
                logprobs = [round(float(x), 6) for x in trainer_logprobs[row, :width]]
            out[f"{group.group_id}/{index}"] = {"advantage": adv, "trainer_logprobs": logprobs}
            row += 1
    return out


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def _contiguous(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage (tied embeddings): store each tensor on its own.
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        ptr = v.data_ptr()
        out[k] = v.detach().clone().contiguous() if ptr in seen else v.detach().contiguous()
        seen.add(ptr)
    return out
