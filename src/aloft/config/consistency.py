"""Cross-section consistency of an ``AloftConfig``: settings each valid alone that do not go together.

Each failure is a ``ValueError`` naming the keys and the fix; pydantic turns it into the config's
one-line error. Registry names are checked later, by the trainer (``config`` imports no registry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aloft.config.schema import AloftConfig


def check_consistency(cfg: AloftConfig) -> None:
    algo, gen, trainer = cfg.algorithm, cfg.generator, cfg.trainer
    if trainer.max_steps < 0 or (trainer.max_steps == 0 and not trainer.eval_before_training):
        raise ValueError(
            f"trainer.max_steps={trainer.max_steps} must be >= 1 (0 only evaluates the starting model, "
            "with trainer.eval_before_training=true)"
        )
    if algo.geo_mask_low > algo.geo_mask_high:
        raise ValueError(
            f"algorithm.geo_mask_low={algo.geo_mask_low} is above algorithm.geo_mask_high="
            f"{algo.geo_mask_high}; set geo_mask_low <= 1 <= geo_mask_high"
        )
    if cfg.env.name == "agent" and trainer.deterministic:
        raise ValueError(
            "env=agent cannot run with trainer.deterministic=true: its programs send requests when they "
            "choose, so the engine's batches cannot repeat in lockstep; set trainer.deterministic=false"
        )
    if cfg.engine.backend == "remote" and not cfg.engine.urls:
        raise ValueError(
            "engine.backend=remote needs engine.urls=[http://127.0.0.1:8000] (start one with `aloft serve MODEL`)"
        )
    if algo.advantage == "gae" and not cfg.critic.enabled:
        raise ValueError(
            "algorithm.advantage=gae needs a value model: set critic.enabled=true "
            "(or use a critic-free estimator such as grpo or rloo)"
        )
    group_estimators = {"grpo", "dr_grpo", "rloo", "reinforce++_baseline"}
    if algo.advantage in group_estimators and gen.n_samples < 2:
        raise ValueError(
            f"algorithm.advantage={algo.advantage} compares samples of one prompt: "
            f"set generator.n_samples >= 2 (got {gen.n_samples})"
        )
    if trainer.prompts_per_step % algo.mini_batches:
        raise ValueError(
            f"trainer.prompts_per_step={trainer.prompts_per_step} is not divisible by "
            f"algorithm.mini_batches={algo.mini_batches}: mini-batches hold whole groups; "
            "pick a divisor"
        )
    if gen.max_new_tokens > gen.max_total_tokens:
        raise ValueError(
            f"generator.max_new_tokens={gen.max_new_tokens} exceeds generator.max_total_tokens="
            f"{gen.max_total_tokens}: raise max_total_tokens or lower max_new_tokens"
        )
    if algo.overlong_buffer_len >= gen.max_new_tokens * gen.max_turns and algo.overlong_buffer_len:
        raise ValueError(
            f"algorithm.overlong_buffer_len={algo.overlong_buffer_len} must be smaller than the "
            "completion budget (generator.max_new_tokens x max_turns)"
        )
    if not 0 <= algo.clip_low < 1:
        raise ValueError(f"algorithm.clip_low={algo.clip_low} must be in [0, 1)")
    if algo.dynamic_sampling and gen.n_samples < 2:
        raise ValueError("algorithm.dynamic_sampling=true needs generator.n_samples >= 2")
    if trainer.strategy == "single" and trainer.num_processes != 1:
        raise ValueError(
            f"trainer.num_processes={trainer.num_processes} needs a data-parallel strategy: set trainer.strategy=fsdp2"
        )
    if trainer.strategy not in ("single", "fsdp2") and cfg.model.lora_rank > 0:
        raise ValueError(
            f"trainer.strategy={trainer.strategy} does not support LoRA yet: set trainer.strategy=fsdp2 "
            "(or single), or model.lora_rank=0"
        )
    if cfg.engine.sleep_level == 2 and cfg.model.lora_rank and cfg.placement.lora_sync == "adapter":
        raise ValueError(
            "engine.sleep_level=2 drops the engine's weights while the learner trains, and adapter "
            "syncs (placement.lora_sync=adapter) need the base weights kept: set engine.sleep_level=1 "
            "or placement.lora_sync=merged"
        )
    if (trainer.fsdp_mixed_precision or trainer.fsdp_cpu_offload) and trainer.strategy != "fsdp2":
        raise ValueError(
            "trainer.fsdp_mixed_precision and trainer.fsdp_cpu_offload configure FSDP2: set "
            "trainer.strategy=fsdp2 (or optim.bf16_autocast for bf16 without it)"
        )
    if trainer.fsdp_cpu_offload and trainer.device == "cpu":
        raise ValueError(
            "trainer.fsdp_cpu_offload moves state from a GPU to CPU memory, and trainer.device=cpu "
            "trains in CPU memory already: set trainer.fsdp_cpu_offload=false, or train on a GPU"
        )
    if trainer.strategy == "ulysses" and cfg.optim.packing is False:
        raise ValueError("trainer.strategy=ulysses splits packed sequences: set optim.packing=true")
    if trainer.strategy == "ulysses" and cfg.model.gradient_checkpointing:
        # Its attention needs the rank group, which a checkpointed layer's recomputation has not.
        raise ValueError(
            "trainer.strategy=ulysses does not recompute checkpointed layers yet: set "
            "model.gradient_checkpointing=false, or trainer.strategy=fsdp2"
        )
    placement = cfg.placement
    if trainer.plan != "sync":
        if placement.backend == "local" and trainer.strategy != "single":
            raise ValueError(
                f"trainer.plan={trainer.plan} overlaps generation with updates in one driver: with "
                f"trainer.strategy={trainer.strategy} use placement.backend=ray, or trainer.plan=sync"
            )
        if placement.backend == "ray" and placement.mode == "colocated":
            raise ValueError(
                f"trainer.plan={trainer.plan} generates while the learner trains, but colocated engines "
                "sleep during updates: set placement.mode=disaggregated"
            )
    if not algo.geo_mask_low <= 1 <= algo.geo_mask_high or algo.tis_cap < 1:
        raise ValueError(
            "algorithm.geo_mask_low <= 1 <= algorithm.geo_mask_high and algorithm.tis_cap >= 1 must hold"
        )
    if placement.backend == "ray":
        if trainer.strategy == "ulysses":
            raise ValueError(
                "placement.backend=ray runs trainer.strategy single, fsdp2 or deepspeed: set trainer.strategy=fsdp2"
            )
        if placement.mode == "colocated" and placement.num_engines > trainer.num_processes:
            raise ValueError(
                f"placement.num_engines={placement.num_engines} colocated engines need as many training "
                f"processes (trainer.num_processes={trainer.num_processes}): raise num_processes or use "
                "placement.mode=disaggregated"
            )
        if cfg.engine.backend not in ("hf", "vllm", "sglang"):
            raise ValueError(
                f"placement.backend=ray runs engine.backend hf, vllm or sglang in actors, not "
                f"{cfg.engine.backend}: use placement.backend=local for remote servers"
            )
    if cfg.data.builder is None and not cfg.data.train_files:
        raise ValueError("no training data: set data.train_files=[...] or data.builder=NAME")
