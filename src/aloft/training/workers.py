"""Model workers for single-process training: policy, reference and critic.

Each worker owns a model (fp32 master weights) and, when trainable, its optimizer and LR schedule.
They take a ``TrainBatch`` and return tensors aligned with its completion columns ``[B, T]``.
Mini-batches are split into micro-batches that all divide by the mini-batch's ``LossNormalizer``,
so gradients add up to exactly the full mini-batch's gradient whatever the micro-batch size.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from aloft.algorithms import (
    LossNormalizer,
    aggregate_loss,
    clipped_value_loss,
    get_policy_loss,
    kl_divergence,
    logprobs_and_entropy_from_logits,
    logprobs_from_logits,
)
from aloft.models import load_model
from aloft.models.device import autocast
from aloft.training.batch import TrainBatch
from aloft.training.forward import enable_gradient_checkpointing, token_logits
from aloft.training.lora import adapters_from_state, lora_scale, merged_state, with_lora
from aloft.training.optim import OptimSettings, make_optimizer
from aloft.training.packing import MicroBatching
from aloft.training.strategies import SingleProcess, Strategy
from aloft.types import LoraAdapters


class _Trainable:
    """Optimizer step bookkeeping shared by the policy and the critic."""

    model: nn.Module
    settings: OptimSettings
    strategy: Strategy = SingleProcess()
    device: torch.device = torch.device("cpu")
    """Where the model computes and micro-batches go (its parameters may sit in CPU memory between
    steps, offloaded, or always, under FSDP2's CPU offload)."""

    def _init_optim(self) -> None:
        params = [p for p in self.model.parameters() if p.requires_grad]
        built = self.strategy.build_optimizer(self.model, self.settings)
        self.optimizer, self.scheduler = built or make_optimizer(params, self.settings)

    def _step(self) -> float:
        norm = self.strategy.step()
        if norm is not None:
            return norm
        self.strategy.before_step(self.model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.settings.max_grad_norm > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm))
        else:
            norm = float(
                torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
            )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight in full (a collective under a data-parallel strategy: all ranks call it)."""
        return self.strategy.full_state_dict(self.model)

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.strategy.load_full_state_dict(self.model, state)

    def optim_state_dict(self) -> dict[str, Any]:
        optimizer = self.strategy.optim_state_dict(self.model, self.optimizer)
        return {"optimizer": optimizer, "scheduler": self.scheduler.state_dict()}

    def load_optim_state_dict(self, state: dict[str, Any]) -> None:
        self.strategy.load_optim_state_dict(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    @property
    def offloaded(self) -> bool:
        """The parameters wait in CPU memory away from ``device`` (``move_to("cpu")``)."""
        if self.strategy.places_parameters:
            return False
        return next(self.model.parameters()).device.type != self.device.type

    def move_to(self, device: str | torch.device) -> None:
        """Parameters, gradients and optimizer state to ``device`` (offload between phases: to
        "cpu" frees the GPU memory they held, back to ``self.device`` before the next update; the
        caller releases the allocator's cache once everything has moved, ``Learner.move_to``).
        A no-op under a strategy that keeps them in CPU memory itself (FSDP2's CPU offload)."""
        if self.strategy.places_parameters:
            return
        self.model.to(device)
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:  # AdamW's step counter stays where it is
                    state[key] = value.to(device)


class PolicyWorker(_Trainable):
    """The policy: logprobs, the clipped policy update, and named weights for the engine."""

    def __init__(
        self,
        model_path: str,
        settings: OptimSettings,
        *,
        temperature: float = 1.0,
        gradient_checkpointing: bool = False,
        lora: dict[str, Any] | None = None,
        strategy: Strategy | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        """``strategy``: where the model lives and which micro-batches run here (default: this
        process); ``device``: where it computes."""
        self.settings = settings
        self.strategy: Strategy = strategy or SingleProcess()
        self.device = torch.device(device)
        self.temperature = temperature if temperature > 0 else 1.0
        self.entropy_in_loss = False
        # The padded prompt-sharing forward needs a KV cache, which gradient checkpointing turns off;
        # a packed row shares prompts through its attention and needs none.
        self.share_prompts = settings.share_prompts and (settings.packing or not gradient_checkpointing)
        model = load_model(model_path, dtype=torch.float32)
        model.config.use_cache = False
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        self.lora = bool(lora and lora.get("r", 0) > 0)
        self.lora_scale = 0.0
        if self.lora:
            assert lora is not None
            model = with_lora(model, lora)
            self.lora_scale = lora_scale(lora)
        # A strategy that offloads to CPU memory places the parameters itself.
        self.model = self.strategy.wrap(model if self.strategy.places_parameters else model.to(self.device))
        self.update_logprobs: torch.Tensor | None = None
        """The last on-policy update's pre-update logprobs, [B, T] (see ``update``)."""
        self._init_optim()

    def _logprobs_and_entropy(
        self, batch: TrainBatch, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.strategy.sequence_parallel:
            with autocast(self.device, self.settings.bf16_autocast):
                logprobs, entropy = self.strategy.logprobs_and_entropy(
                    self.model, batch, self.temperature, self.entropy_in_loss and with_entropy
                )
            return logprobs, entropy if with_entropy else None
        with autocast(self.device, self.settings.bf16_autocast):
            logits, targets, to_rows = token_logits(
                self.model,
                batch,
                self.share_prompts,
                self.settings.packing,
                self.device,
                self.settings.min_shared_prefix if self.share_prompts else 0,
            )
        # Half-precision logits are upcast a row at a time inside (no [R, C, V] float32 copy).
        if not with_entropy:
            return to_rows(logprobs_from_logits(logits, targets, temperature=self.temperature)), None
        # One pass for both; the [R, C, V] softmax stays out of the graph unless entropy is trained on.
        logprobs, entropy = logprobs_and_entropy_from_logits(
            logits, targets, temperature=self.temperature, entropy_grad=self.entropy_in_loss
        )
        return to_rows(logprobs), to_rows(entropy)

    @torch.no_grad()
    def compute_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """[B, T] logprobs of the completion tokens under the current policy (no grad; on the CPU)."""
        self.model.eval()
        out = [self._logprobs_and_entropy(batch.select(rows), False)[0].cpu() for rows in self._micro(batch)]
        return _pad_cat(out, batch.completion_width)

    def update(
        self,
        batch: TrainBatch,
        advantages: torch.Tensor,
        algo: Any,
        *,
        old_logprobs: torch.Tensor | None,
        ref_logprobs: torch.Tensor | None,
        mini_batches: list[list[int]],
        max_len: int,
    ) -> dict[str, float]:
        """One pass of optimizer steps, one per mini-batch (lists of row indices).

        ``old_logprobs`` None means the batch is exactly on-policy (one epoch, one mini-batch): the
        ratio's denominator is then the detached current logprobs, saving a forward pass.
        """
        self.model.train()
        self.entropy_in_loss = algo.entropy_coef != 0
        policy_loss = get_policy_loss(algo.policy_loss)
        totals: dict[str, float] = defaultdict(float)
        # On-policy, the update's own forward gives the pre-update logprobs: kept for the rollouts
        # file ([B, T]; NaN on rows another data-parallel rank computed).
        self.update_logprobs = (
            torch.full(batch.loss_mask.shape, float("nan")) if old_logprobs is None else None
        )
        for rows in mini_batches:
            mini = batch.select(rows)
            normalizer = LossNormalizer.from_mask(
                mini.loss_mask, max_len=max_len, count_masked_rows=algo.seq_mean_counts_masked_rows
            )
            tokens = max(normalizer.num_tokens, 1)
            mini_totals: dict[str, float] = defaultdict(float)  # this rank's sums over its micro-batches
            micro_batches = self.settings.micro_batching.split(batch, rows)
            sizes = [int(batch.attention_mask[m].sum()) for m in micro_batches]
            # ``scale`` is 0 only for a data-parallel rank's filler pass (see Strategy.assign).
            assigned = self.strategy.assign(micro_batches, sizes)
            for index, (global_rows, scale) in enumerate(assigned):
                micro = batch.select(global_rows)  # on the CPU: a packed forward lays it out there
                t = micro.completion_width
                logprobs, entropy = self._logprobs_and_entropy(micro, with_entropy=True)
                micro = micro.to(self.device)  # the loss's side
                mask = micro.loss_mask
                old = (
                    _rows_on(old_logprobs, global_rows, t, self.device)
                    if old_logprobs is not None
                    else logprobs.detach()
                )
                if self.update_logprobs is not None and scale > 0:
                    self.update_logprobs[global_rows, :t] = logprobs.detach().float().cpu()
                loss, metrics = policy_loss(
                    logprobs,
                    old,
                    _rows_on(advantages, global_rows, t, self.device),
                    mask,
                    algo,
                    micro.sampler_logprobs,
                    normalizer=normalizer,
                )
                if ref_logprobs is not None and algo.kl_coef > 0 and algo.kl_penalty == "loss":
                    kl = kl_divergence(
                        logprobs,
                        _rows_on(ref_logprobs, global_rows, t, self.device),
                        algo.kl_estimator,
                        algo.kl_clamp,
                    )
                    kl_loss = aggregate_loss(kl, mask, algo.loss_reduction, normalizer)
                    loss = loss + algo.kl_coef * kl_loss
                    mini_totals["policy/kl_loss"] += float(kl_loss.detach()) * scale
                assert entropy is not None
                entropy_mean = aggregate_loss(entropy, mask, "token_mean", normalizer)
                if algo.entropy_coef:
                    loss = loss - algo.entropy_coef * aggregate_loss(
                        entropy, mask, algo.loss_reduction, normalizer
                    )
                self.strategy.backward(loss * scale, last=index == len(assigned) - 1)
                weight = float(mask.sum()) / tokens * scale  # token-weighted means over the mini-batch
                if (
                    old_logprobs is None
                ):  # on-policy: these are the pre-update logprobs, compare to the sampler
                    diff = ((logprobs.detach() - micro.sampler_logprobs).abs() * mask).sum() / tokens
                    mini_totals["logprob/sampler_abs_diff"] += float(diff) * scale
                mini_totals["policy/loss"] += float(loss.detach()) * scale
                mini_totals["policy/entropy"] += float(entropy_mean.detach()) * scale
                for k, v in metrics.items():
                    mini_totals[f"policy/{k}"] += float(v) * weight
            for key, value in self.strategy.reduce_metrics(mini_totals).items():
                totals[key] += value  # summed over data-parallel ranks
            totals["policy/grad_norm"] += self._step()
            totals["policy/lr"] = self.scheduler.get_last_lr()[0]
        n = len(mini_batches)
        return {k: (v if k == "policy/lr" else v / n) for k, v in totals.items()}

    def _micro(self, batch: TrainBatch) -> Iterator[list[int]]:
        yield from self.settings.micro_batching.split(batch)

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Parameters under the plain HF names (LoRA merged) for the inference engine."""
        if not self.lora:
            # Tied weights (embedding = LM head) appear under two names; the engine needs one. A
            # gathered (FSDP2) state dict holds them as two copies, so the model's own tying decides.
            aliases = _tied_aliases(self.model)
            seen: set[tuple[int, tuple[int, ...]]] = set()
            for name, tensor in self.full_state_dict().items():
                key = (tensor.data_ptr(), tuple(tensor.shape))
                if key in seen or name in aliases:
                    continue
                seen.add(key)
                yield name, tensor
            return
        # From the gathered state (a collective under FSDP2), merged with peft's arithmetic.
        yield from merged_state(self.full_state_dict(), self.lora_scale).items()

    def lora_adapters(self) -> LoraAdapters:
        """The LoRA adapters alone, under the HF module names, for an adapter-only weight sync
        (gathered in full: a collective under FSDP2)."""
        assert self.lora, "lora_adapters needs a LoRA policy (model.lora_rank > 0)"
        return adapters_from_state(self.full_state_dict(), self.lora_scale)

    def save_pretrained(self, path: str, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """HF-format export; ``state_dict``: the full weights (from ``full_state_dict()``, needed
        when the model is sharded). A LoRA policy is written twice: merged into a plain model at
        ``path`` (what engines and ``from_pretrained`` load), and its adapter alone at
        ``path/adapter`` (peft's format, a few MB: ``PeftModel.from_pretrained(base, path/adapter)``).
        The policy itself stays a LoRA model."""
        if not self.lora:
            self.model.save_pretrained(path, safe_serialization=True, state_dict=state_dict)
            return
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        state = state_dict if state_dict is not None else self.full_state_dict()
        adapter_dir = os.path.join(path, "adapter")
        os.makedirs(adapter_dir, exist_ok=True)
        adapter = get_peft_model_state_dict(self.model, state_dict=state)
        save_file(
            {k: v.contiguous() for k, v in adapter.items()},
            os.path.join(adapter_dir, "adapter_model.safetensors"),
        )
        self.model.peft_config["default"].save_pretrained(adapter_dir)
        merged = merged_state(state, self.lora_scale)
        self.model.get_base_model().save_pretrained(path, safe_serialization=True, state_dict=merged)


class ReferenceWorker:
    """The initial policy, frozen, for KL terms: a copy of it, or, for a LoRA policy, the policy's
    own base model with its adapters disabled (the same weights, without a second copy in memory)."""

    def __init__(
        self,
        model_path: str,
        *,
        temperature: float,
        micro_batching: MicroBatching,
        bf16_autocast: bool,
        lora_policy: nn.Module | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        """``lora_policy``: a LoRA policy's (peft) model, whose frozen base is the reference."""
        self.lora_policy = lora_policy
        self.device = torch.device(device)
        if lora_policy is not None:
            self.model = lora_policy
        else:
            self.model = (
                load_model(model_path, dtype=torch.float32).eval().requires_grad_(False).to(self.device)
            )
        self.temperature = temperature if temperature > 0 else 1.0
        self.micro_batching = micro_batching
        self.bf16_autocast = bf16_autocast

    def _base_only(self) -> contextlib.AbstractContextManager[Any]:
        return self.model.disable_adapter() if self.lora_policy is not None else contextlib.nullcontext()

    @torch.no_grad()
    def compute_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        out = []
        for rows in self.micro_batching.split(batch):
            micro = batch.select(rows)
            with autocast(self.device, self.bf16_autocast), self._base_only():
                logits, targets, to_rows = token_logits(
                    self.model,
                    micro,
                    True,
                    self.micro_batching.packing,
                    self.device,
                    self.micro_batching.min_shared_prefix,
                )
            out.append(to_rows(logprobs_from_logits(logits, targets, temperature=self.temperature)).cpu())
        return _pad_cat(out, batch.completion_width)


class ValueModel(nn.Module):
    """A transformer backbone with a scalar head: V(s_t) for every position."""

    def __init__(self, model_path: str) -> None:
        super().__init__()
        causal_lm = load_model(model_path, dtype=torch.float32)
        self.backbone = causal_lm.get_decoder()
        self.config = causal_lm.config
        hidden = causal_lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.value_head.weight)  # start from V = 0: no spurious early advantages
        nn.init.zeros_(self.value_head.bias)

    def forward(self, batch: TrainBatch) -> torch.Tensor:
        """[B, T] value of the state before each completion token."""
        hidden = self.backbone(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
        ).last_hidden_state
        p, t = batch.prompt_width, batch.completion_width
        return self.value_head(hidden[:, p - 1 : p - 1 + t]).squeeze(-1).float()


class CriticWorker(_Trainable):
    def __init__(self, model_path: str, settings: OptimSettings, device: torch.device | str = "cpu") -> None:
        self.settings = settings
        self.device = torch.device(device)
        self.model = ValueModel(model_path).to(self.device)
        self._init_optim()

    @torch.no_grad()
    def compute_values(self, batch: TrainBatch) -> torch.Tensor:
        self.model.eval()
        out = []
        for rows in self.settings.micro_batching.split(batch):
            with autocast(self.device, self.settings.bf16_autocast):
                out.append(self.model(batch.select(rows).to(self.device)).float().cpu())
        return _pad_cat(out, batch.completion_width)

    def update(
        self,
        batch: TrainBatch,
        old_values: torch.Tensor,
        returns: torch.Tensor,
        clip: float,
        mini_batches: list[list[int]],
    ) -> dict[str, float]:
        self.model.train()
        totals: dict[str, float] = defaultdict(float)
        for rows in mini_batches:
            normalizer = LossNormalizer.from_mask(batch.select(rows).loss_mask)
            micro_batches = self.settings.micro_batching.split(batch, rows)
            for global_rows in micro_batches:
                micro = batch.select(global_rows).to(self.device)
                t = micro.completion_width
                with autocast(self.device, self.settings.bf16_autocast):
                    values = self.model(micro).float()
                loss, metrics = clipped_value_loss(
                    values,
                    _rows_on(old_values, global_rows, t, self.device),
                    _rows_on(returns, global_rows, t, self.device),
                    micro.loss_mask,
                    clip,
                    normalizer,
                )
                loss.backward()
                totals["critic/loss"] += float(loss.detach())
                for k, v in metrics.items():
                    totals[f"critic/{k}"] += float(v) / len(micro_batches)
            totals["critic/grad_norm"] += self._step()
        return {k: v / len(mini_batches) for k, v in totals.items()}


def _tied_aliases(model: nn.Module) -> set[str]:
    """Parameter names that are a second name of an earlier parameter (``lm_head.weight`` when the
    embeddings are tied)."""
    first: dict[int, str] = {}
    aliases = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            aliases.add(name)
        else:
            first[id(parameter)] = name
    return aliases


def _rows_on(x: torch.Tensor, rows: list[int], width: int, device: torch.device) -> torch.Tensor:
    """A micro-batch's ``[b, width]`` slice of a step's ``[B, T]`` tensor (kept on the CPU), on ``device``."""
    return x[rows, :width].to(device)


def _pad_cat(chunks: list[torch.Tensor], width: int) -> torch.Tensor:
    """Concatenate [b_i, t_i] chunks (trimmed by ``select``) back to [B, width], zero-padded."""
    return torch.cat([nn.functional.pad(c, (0, width - c.shape[1])) for c in chunks], dim=0)
