"""Torch-free contracts shared by every stage of the loop (docs/reference/design.md §3-§4).

Every stage speaks these types: the gym produces ``Message`` lists, the inference engines take
``GenerationRequest`` and return ``Completion``, the generator assembles ``Trajectory`` objects
grouped into ``TrajectoryGroup``, and the trainer turns groups into tensors.

Vocabulary: prompt / completion, ``logprobs``, ``loss_mask`` (1 = token sampled by the policy and
trained on), ``sampler_logprobs`` (what the engine reported), ``policy_version``, ``group`` (the n
samples of one prompt).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict


class InfrastructureError(RuntimeError):
    """A failure that is not the policy's doing: a server down, a database missing, a sandbox that
    cannot start. A tool raises it (or a subclass) instead of answering; ``ToolGroup.call`` lets it
    through rather than showing it to the policy, the env's step raises, and the trajectory fails
    (status ``env_error``): it is never trained on, never a reward."""


class Message(TypedDict, total=False):
    """One chat message in the OpenAI format: ``{"role": ..., "content": ...}``."""

    role: str
    content: str
    tool_calls: list[dict[str, Any]]
    name: str


class RolloutStatus(StrEnum):
    """How a trajectory ended."""

    STOP = "stop"
    """The policy stopped (EOS / stop string) and the env said done."""
    LENGTH = "length"
    """A token budget ran out (max new tokens, max total tokens) or the turn limit was reached."""
    ENV_ERROR = "env_error"
    """The environment or the engine raised, or an env call ran past ``generator.env_timeout_s``: an
    infrastructure failure, not the policy's doing. The trajectory is never trained on (its group's
    advantages use the samples that ran); it is counted in ``rollout/error_share``, kept with its
    error in the rollouts file, and a step whose share passes ``trainer.max_error_share`` stops the
    run."""
    ABORTED = "aborted"
    """Generation was aborted (engine paused for good, shutdown)."""


@dataclass(kw_only=True)
class SamplingParams:
    """Sampling settings for one generation request.

    ``temperature == 0`` means greedy decoding. Sampler logprobs are always reported under the
    temperature-scaled distribution ``log_softmax(logits / temperature)`` (temperature 1 when greedy),
    before top-p / top-k truncation: that is the distribution the trainer recomputes.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 (or -1) disables top-k."""
    stop: list[str] = field(default_factory=list)
    """Stop strings; the completion ends after the token that completes one (the string is kept)."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Extra stop token ids besides the tokenizer's EOS."""
    seed: int | None = None
    """Per-request seed: the same seed and prompt give the same tokens regardless of batching."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")


@dataclass(kw_only=True)
class GenerationRequest:
    """One token-in request to an ``InferenceEngine``."""

    prompt_ids: list[int]
    sampling: SamplingParams
    session_id: str | None = None
    """Groups the turns of one trajectory (engines may use it for cache reuse or sticky routing)."""


@dataclass(kw_only=True)
class Completion:
    """What an engine returns for one request: token-out, with a logprob per generated token."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """``"stop"`` (EOS, stop token or stop string), ``"length"`` (max_tokens) or ``"abort"``."""
    text: str = ""
    policy_version: int = 0

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion has {len(self.token_ids)} token_ids but {len(self.logprobs)} logprobs"
            )


@dataclass(kw_only=True)
class Trajectory:
    """One episode, flat and mask-aligned.

    ``completion_ids`` holds everything after the prompt: policy tokens (``loss_mask`` 1) and env
    observation tokens (``loss_mask`` 0), in order. ``sampler_logprobs`` and ``rewards`` have the same
    length; ``sampler_logprobs`` is 0 where masked, ``rewards`` carries each turn's reward on that
    turn's last policy token and 0 elsewhere.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    sampler_logprobs: list[float]
    rewards: list[float]
    status: RolloutStatus
    group_id: str
    policy_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form, JSON-serialisable extras for logging (prompt text, ground truth, turns, ...)."""

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        for name in ("loss_mask", "sampler_logprobs", "rewards"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"Trajectory.{name} has length {len(getattr(self, name))}, "
                    f"expected {n} (= len(completion_ids))"
                )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("Trajectory.loss_mask must contain only 0 and 1")
        if not all(math.isfinite(r) for r in self.rewards):
            raise ValueError("Trajectory.rewards must be finite")
        self.status = RolloutStatus(self.status)

    @property
    def reward(self) -> float:
        """The episode return (sum of per-turn rewards)."""
        return float(sum(self.rewards))

    @property
    def num_policy_tokens(self) -> int:
        return int(sum(self.loss_mask))

    @property
    def failed(self) -> bool:
        """The env or the engine raised (status ``env_error``): never trained on, never a reward."""
        return self.status is RolloutStatus.ENV_ERROR

    def to_json(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "status": self.status.value,
            "policy_version": self.policy_version,
            "reward": self.reward,
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "loss_mask": self.loss_mask,
            "sampler_logprobs": self.sampler_logprobs,
            "rewards": self.rewards,
            "metrics": self.metrics,
            "info": self.info,
        }


@dataclass(kw_only=True)
class TrajectoryGroup:
    """The n trajectories sampled for one prompt (the unit group-relative estimators work on)."""

    group_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        """The rewards of the samples that ran (failed ones have none)."""
        return [t.reward for t in self.trajectories if not t.failed]

    @property
    def has_variance(self) -> bool:
        """False when every sample that ran got the same reward (zero advantage under group
        baselines)."""
        r = self.rewards
        return len(r) > 1 and max(r) - min(r) > 1e-9


@dataclass(frozen=True)
class LoraAdapters:
    """A LoRA policy's adapters, for an adapter-only weight sync (an engine's ``update_lora``).

    Each module's weight becomes ``W0 + scale * B @ A``, where W0 is the module's weight when the
    engine received its first adapters (the base model's): only the adapters travel, a small
    fraction of the model's bytes, and the engine holds the same merged weights a full sync gives.
    """

    scale: float
    modules: dict[str, tuple[Any, Any]]
    """HF module name (``model.layers.0.self_attn.q_proj``) -> (A ``[r, in]``, B ``[out, r]``)."""

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b in self.modules.values())

    @property
    def rank(self) -> int:
        """The adapters' rank r (the largest, should modules differ)."""
        return max(int(a.shape[0]) for a, _ in self.modules.values())

    def save_peft(self, directory: str | os.PathLike[str]) -> None:
        """Write the adapters in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``),
        what vLLM's LoRA loading and ``PeftModel.from_pretrained`` read: ``lora_alpha = scale * r``
        reproduces ``scale`` under peft's ``alpha / r``. Written to a sibling and renamed into place,
        so a reader never sees a half-written adapter."""
        import json
        import shutil
        import tempfile

        from safetensors.torch import save_file

        target = Path(directory)
        rank = self.rank
        if any(int(a.shape[0]) != rank for a, _ in self.modules.values()):
            raise ValueError("LoraAdapters.save_peft: every module must have the same rank")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        tensors = {}
        for module, (a, b) in self.modules.items():
            tensors[f"base_model.model.{module}.lora_A.weight"] = a.detach().contiguous()
            tensors[f"base_model.model.{module}.lora_B.weight"] = b.detach().contiguous()
        save_file(tensors, str(staging / "adapter_model.safetensors"))
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": rank,
            "lora_alpha": self.scale * rank,
            "target_modules": sorted({module.rsplit(".", 1)[-1] for module in self.modules}),
            "lora_dropout": 0.0,
            "bias": "none",
            "use_rslora": False,
            "use_dora": False,
        }
        (staging / "adapter_config.json").write_text(json.dumps(config, indent=2))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
