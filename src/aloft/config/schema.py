"""The typed run configuration: one section per component.

Every field's docstring is its documentation (``aloft train --help`` prints them). Sections forbid
unknown keys, so a typo fails at start instead of silently doing nothing. Cross-field consistency
(a critic-based estimator without a critic, batch geometry, ...) is checked in
``aloft.config.consistency``; registry names (estimators, losses, envs, engines) are checked by
the trainer before anything heavy runs, since ``config`` must not import the registries.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from aloft.config.consistency import check_consistency


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class ModelConfig(Section):
    path: str = "smollm2-135m-instruct"
    """Policy model: an HF model directory, a hub id (where a hub is reachable), or a built-in name
    (smollm2-135m-instruct)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    lora_rank: NonNegativeInt = 0
    """LoRA rank (peft); 0 trains all parameters."""
    lora_alpha: PositiveInt = 16
    """LoRA scaling alpha."""
    lora_target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    """Module names LoRA adapters attach to."""


class DataConfig(Section):
    train_files: list[str] = []
    """Training rows (.jsonl or .parquet, docs/reference/design.md §4 row format). Empty: build them with `builder`."""
    eval_files: list[str] = []
    """Held-out eval rows. Empty: build them with `builder` (a disjoint seed)."""
    builder: str | None = None
    """Built-in dataset builder used when no files are given (e.g. arithmetic, reasoning_gym)."""
    builder_args: dict[str, Any] = {}
    """Keyword arguments for the builder."""
    train_size: NonNegativeInt = 2000
    """Rows the builder makes for training (0: every row of a fixed dataset, e.g. sql)."""
    eval_size: NonNegativeInt = 64
    """Rows the builder makes for eval (also caps eval over eval_files when > 0)."""
    eval_split: str = "eval"
    """The builder split eval rows come from (sql: "eval" = other questions on the training
    databases, "heldout" = databases never seen in training)."""
    shuffle: bool = True
    """Shuffle the training rows every epoch (deterministic from trainer.seed)."""


class EnvConfig(Section):
    name: str | None = None
    """Environment id for rows without env_class (and for the builder's rows when set)."""
    config: dict[str, Any] = {}
    """Per-env configuration passed to gym.make (e.g. answer_format, max_turns)."""


class GeneratorConfig(Section):
    n_samples: PositiveInt = 4
    """Samples per prompt (the group size for group-relative estimators)."""
    max_turns: PositiveInt = 1
    """Turn limit per trajectory (the env may end earlier)."""
    max_new_tokens: PositiveInt = 64
    """Token budget for one policy turn."""
    max_total_tokens: PositiveInt = 1024
    """Token budget for a whole completion (policy turns plus observations)."""
    temperature: NonNegativeFloat = 1.0
    """Sampling temperature for training rollouts."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold (1 disables)."""
    top_k: int = Field(0, ge=-1)
    """Top-k sampling (0 disables)."""
    stop: list[str] = []
    """Extra stop strings."""
    eval_temperature: NonNegativeFloat = 0.0
    """Sampling temperature for eval (0 = greedy)."""
    eval_n_samples: PositiveInt = 1
    """Samples per eval prompt; pass@k is reported for k up to this."""
    env_threads: PositiveInt = 64
    """Most env calls at once, each on its own thread (tools mostly wait: databases, sandboxes,
    HTTP), so that many trajectories' tool calls run at once."""
    env_timeout_s: PositiveFloat | None = 300.0
    """The longest one env call (construction, reset, step) may take; past it the trajectory fails
    as ``env_error`` (never a reward) and the run goes on. The default is far above any built-in
    env's step (their tools stop themselves within seconds); null disables it."""


class EngineConfig(Section):
    backend: str = "hf"
    """Inference engine (hf is the embedded default)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Engine weight dtype; auto = bfloat16 where the hardware has native bf16 math (GPUs, CPUs with
    avx512_bf16/AMX), float32 elsewhere (bf16 is several times slower on an AVX2-only CPU)."""
    max_batch_size: PositiveInt = 64
    """Most sequences the engine decodes at once."""
    prefix_cache_gb: NonNegativeFloat = 2.0
    """hf engine: memory for the KV of finished turns and prompts, so a trajectory's next turn
    prefills only its new tokens (least recently used out first; 0 turns it off)."""
    min_shared_prefix: NonNegativeInt = 64
    """hf engine, models with shared-prefix attention (plain causal attention): prompts that share a
    beginning of this many tokens or more (a system message, a database schema) with each other or
    with a prompt decoding or cached prefill it once (each keeps at least one token of its own);
    their logprobs then equal a plain prefill's up to float rounding, not bit for bit. 0: every
    prompt prefilled whole."""
    urls: list[str] = []
    """Server URLs for backend=remote (any OpenAI-compatible server: aloft serve, vllm serve, ...)."""
    api_key: str | None = None
    """Bearer key for backend=remote."""
    server: Literal["aloft", "vllm", "sglang"] = "aloft"
    """backend=remote: the servers' kind (aloft serve; vllm serve started with VLLM_SERVER_DEV_MODE=1
    and --logprobs-mode processed_logprobs; or SGLang, spoken to through its native /generate)."""
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    """backend=hf: where the engine's copy of the policy lives (auto: the GPU of this local rank
    when torch sees one, else the CPU). vLLM and SGLang find their GPUs themselves."""
    tensor_parallel_size: PositiveInt = 1
    """vllm, sglang: GPUs one engine's weights are split over (vLLM tensor_parallel_size, SGLang
    tp_size)."""
    gpu_memory_fraction: float | None = Field(None, gt=0.0, le=1.0)
    """vllm, sglang on GPUs: share of the GPU's memory the engine takes for weights and KV cache
    (vLLM gpu_memory_utilization, default 0.9; SGLang mem_fraction_static, default its own). Leave
    room for the learner when they share a GPU (colocated)."""
    prefix_caching: bool = True
    """vllm, sglang: reuse the KV cache of shared prompt prefixes (group samples, earlier turns)."""
    sleep_level: Literal[1, 2] = 1
    """vllm on GPUs, while the learner trains (colocated): 1 moves the weights to CPU memory and
    drops the KV cache; 2 drops both (the next weight sync reloads them: not with
    placement.lora_sync=adapter, whose adapters need the base weights kept)."""

    def backend_options(self) -> dict[str, Any]:
        """Settings only this section's backend takes, as engine constructor arguments."""
        if self.backend == "hf":
            return {
                "prefix_cache_gb": self.prefix_cache_gb,
                "min_shared_prefix": self.min_shared_prefix,
                "device": self.device,
            }
        if self.backend == "vllm":
            fraction = (
                {}
                if self.gpu_memory_fraction is None
                else {"gpu_memory_utilization": self.gpu_memory_fraction}
            )
            return {
                "tensor_parallel_size": self.tensor_parallel_size,
                "enable_prefix_caching": self.prefix_caching,
                "sleep_level": self.sleep_level,
                **fraction,
            }
        if self.backend == "sglang":
            fraction = (
                {} if self.gpu_memory_fraction is None else {"mem_fraction_static": self.gpu_memory_fraction}
            )
            return {
                "tp_size": self.tensor_parallel_size,
                "disable_radix_cache": not self.prefix_caching,
                **fraction,
            }
        return {}


class AlgorithmConfig(Section):
    advantage: str = "grpo"
    """Advantage estimator: gae, grpo, dr_grpo, rloo, reinforce++, reinforce++_baseline, or a registered one."""
    norm_adv_by_std: bool = True
    """grpo: divide by the group's std (False = Dr.GRPO)."""
    group_of_one: Literal["zero", "score"] = "zero"
    """grpo, dr_grpo, rloo: a group of one sample gets advantage 0, or its score as verl and
    skyrl-train give it (score / (1 + 1e-6) under grpo with the std division)."""
    whiten_formula: Literal["std_eps", "rsqrt_var_eps"] = "std_eps"
    """Batch whitening (reinforce++, whiten_gae): (x - mean) / (std + 1e-6), or verl's and
    skyrl-train's (x - mean) * rsqrt(var + 1e-8)."""
    whiten_gae: bool = False
    """gae: whiten the advantages over the batch, as verl and skyrl-train always do."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount factor (gae, reinforce++)."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda."""
    policy_loss: str = "ppo"
    """Policy loss: ppo, dual_clip, gspo, cispo, or a registered one."""
    params: dict[str, Any] = {}
    """Settings the selected estimator or policy loss declared for itself (``params=`` at
    registration), e.g. ``algorithm.params.beta=0.1``; checked before training starts, listed at the
    end of this help."""
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    """PPO epsilon below 1."""
    clip_high: NonNegativeFloat = 0.2
    """PPO epsilon above 1 (0.28 = DAPO clip-higher)."""
    dual_clip_c: float = Field(3.0, gt=1.0)
    """Dual-clip constant for negative advantages (dual_clip loss)."""
    gspo_clip_low: float = Field(3e-4, ge=0.0, lt=1.0)
    """GSPO sequence-ratio epsilon below 1."""
    gspo_clip_high: NonNegativeFloat = 4e-4
    """GSPO sequence-ratio epsilon above 1."""
    cispo_clip_high: NonNegativeFloat = 0.28
    """CISPO: the importance weight is clipped at 1 + this."""
    cispo_clip_low: float | None = Field(None, ge=0.0, le=1.0)
    """CISPO: the importance weight is at least 1 - this; None = no lower bound, as in the paper
    (verl: clip_low, 0.2; skyrl-train: 0.0)."""
    loss_reduction: Literal[
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
    ] = "token_mean"
    """How token losses are averaged over the mini-batch."""
    seq_mean_counts_masked_rows: bool = False
    """seq_mean_* reductions: count rows without a policy token (filtered ones) among the sequences
    averaged over, as skyrl-train divides by the batch size; aloft and verl leave them out."""
    kl_coef: NonNegativeFloat = 0.0
    """KL to the reference policy; > 0 loads a frozen reference model."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (Schulman's k1/k2/k3)."""
    kl_clamp: PositiveFloat | None = None
    """k3: clamp each token's KL estimate to [-kl_clamp, kl_clamp] (verl and skyrl-train: 10);
    None = unclamped."""
    kl_penalty: Literal["loss", "reward"] = "loss"
    """Apply the KL as a loss term or as a per-token reward penalty."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    value_clip: NonNegativeFloat = 0.2
    """Clip range of the critic's value loss."""
    ppo_epochs: PositiveInt = 1
    """Passes over each step's batch."""
    mini_batches: PositiveInt = 1
    """Optimizer steps per epoch; whole groups are kept together, every group in exactly one
    mini-batch, split as evenly as the step's group count allows (7 groups in 2: 4 + 3)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and refill."""
    max_sampling_rounds: PositiveInt = 3
    """Most generation rounds per step when dynamic sampling refills."""
    overlong_filter: bool = False
    """Exclude truncated (status=length) trajectories from the loss."""
    overlong_buffer_len: NonNegativeInt = 0
    """DAPO soft overlong penalty buffer (tokens before the budget); 0 disables."""
    overlong_penalty_factor: NonNegativeFloat = 1.0
    """Largest soft overlong penalty."""
    off_policy_correction: Literal["none", "tis_token", "tis_sequence", "geo_mask"] = "none"
    """Correction for samples from an older policy than the one updated (asynchronous plans, and the
    sampler/trainer mismatch): each token's advantage is weighted by w, from the ratio r of the
    trainer's pre-update logprobs to the sampler's. tis_token: w = min(r_t, tis_cap) per token
    (truncated importance sampling); tis_sequence: w = min(prod_t r_t, tis_cap) per sequence;
    geo_mask: w = 1 if the sequence's geometric-mean ratio is in [geo_mask_low, geo_mask_high],
    else 0 (the sequence is left out)."""
    tis_cap: float = Field(2.0, gt=0.0)
    """Truncation of the importance weight (tis_token, tis_sequence)."""
    geo_mask_low: float = Field(0.98, gt=0.0)
    """geo_mask: lowest geometric-mean ratio kept."""
    geo_mask_high: float = Field(1.02, gt=0.0)
    """geo_mask: highest geometric-mean ratio kept."""


class OptimConfig(Section):
    lr: NonNegativeFloat = 1e-5
    """Policy learning rate (AdamW)."""
    weight_decay: NonNegativeFloat = 0.0
    """AdamW weight decay."""
    betas: tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]] = (
        0.9,
        0.999,
    )
    """AdamW betas."""
    warmup_steps: NonNegativeInt = 0
    """Linear warmup steps."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """LR schedule after warmup (decays to 0 at trainer.max_steps)."""
    max_grad_norm: NonNegativeFloat = 1.0
    """Gradient clipping norm (0 disables)."""
    micro_batch_size: PositiveInt = 8
    """Sequences per forward/backward; the loss does not depend on it."""
    share_prompts: bool = True
    """Run each group's shared prompt through the model once per training forward (same loss and
    gradients, fewer FLOPs). Padded: off when gradient checkpointing is on (it needs a KV cache).
    Packed: the prompt is laid out once in the packed row and the group's later samples attend to it."""
    min_shared_prefix: NonNegativeInt = 64
    """Packed, with share_prompts: prompts that differ but share this many first tokens or more (a
    long system message, a schema before each question) run that beginning once per micro-batch,
    each later one attending to it (same loss and gradients up to float rounding); 0 = only
    identical prompts share. Policy and reference model alike. Generation's counterpart is
    engine.min_shared_prefix."""
    packing: bool | Literal["auto"] = "auto"
    """Pack each micro-batch's sequences end to end with no padding (per-sequence positions, no
    attention across sequences): same loss and gradients, fewer FLOPs (benchmarks/packing.py times
    padded against packed updates). Micro-batches are then cut by micro_batch_tokens instead of
    micro_batch_size. auto = on where the model's attention is plain causal softmax attention (what
    packed rows reproduce; off for soft-capped logits, attention sinks, sliding windows)."""
    micro_batch_tokens: PositiveInt = 4096
    """With packing: most real tokens (prompt + completion, counted per row) per micro-batch; a
    shared prompt is counted in every row, so a packed row can be shorter than this."""
    bf16_autocast: bool | Literal["auto"] = "auto"
    """bfloat16 autocast for training forward/backward (fp32 master weights), on trainer.device;
    auto = only where that device has native bf16 math (GPUs from Ampere on, CPUs with
    avx512_bf16/AMX)."""


class CriticConfig(Section):
    enabled: bool = False
    """Train a value model (needed by gae)."""
    path: str | None = None
    """Critic initialisation (default: model.path) with a fresh scalar value head."""
    lr: NonNegativeFloat = 1e-5
    """Critic learning rate."""


class TrainerConfig(Section):
    name: str = "run"
    """Run name: outputs go to <run_root>/<name>/; rerunning the same command resumes it."""
    run_root: str = "runs"
    """Directory holding run directories."""
    max_steps: int = 20
    """Training steps (0: only the eval before training, e.g. to measure the starting model)."""
    prompts_per_step: PositiveInt = 8
    """Prompts per step (the batch is prompts_per_step x generator.n_samples trajectories)."""
    eval_every: NonNegativeInt = 5
    """Eval on the held-out set every N steps (0 disables periodic eval). The last step is always
    evaluated, as it is always saved; a run without held-out rows (``data.eval_size=0`` and no
    ``data.eval_files``) evaluates nothing."""
    eval_before_training: bool = True
    """Eval once before the first step."""
    checkpoint_every: NonNegativeInt = 5
    """Write a checkpoint every N steps (0 disables; the last step is always saved)."""
    keep_checkpoints: PositiveInt = 2
    """Most recent checkpoints kept."""
    export_final: bool = True
    """Write the final policy in HF format to <run>/export/."""
    save_rollouts: bool = True
    """Write every step's trajectories to <run>/rollouts/step_<n>.jsonl, with what the update used
    (each trajectory's advantage and the trainer's logprobs): what `aloft report` browses."""
    update_kl_rows: NonNegativeInt = 8
    """Rows of each step's batch (evenly spaced) on which ``policy/update_kl``, the KL between the
    policy before and after the step's update, is measured: one forward pass of them after the
    update (0 turns it off; ``aloft.trainer.update_size``)."""
    update_rel_norm: bool = True
    """Log ``policy/update_rel_norm``, ||theta_after - theta_before|| / ||theta_before|| over the
    trained parameters; keeps a copy of them during the update (LoRA: tiny; a full fine-tune: one
    more copy of the weights)."""
    rollouts_per_step: NonNegativeInt = 0
    """Most trajectories a rollouts file keeps, whole groups first (0: all); failed ones are always kept."""
    max_error_share: float = Field(0.5, ge=0.0, le=1.0)
    """Failed trajectories (the env or the engine raised) are never trained on; a step in which more
    than this share of them failed stops the run with the first error (1.0: only when all fail)."""
    seed: int = 0
    """Seed for data order, sampling and initialisation."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms, single-threaded ops and lockstep rollouts (each turn's
    requests reach the engine as one batch in a fixed order): bit-exact reruns and resume, slower."""
    loggers: list[Literal["jsonl", "tensorboard", "wandb", "mlflow"]] = ["jsonl", "tensorboard"]
    """Metric sinks (console progress is always on); wandb needs the extra aloft[wandb], mlflow
    aloft[mlflow]. A resumed run continues the same W&B and MLflow run (their ids are kept in
    <run>/tracking.json)."""
    tracking_project: str = "aloft"
    """The W&B project and the MLflow experiment the run logs to."""
    wandb_entity: str | None = None
    """W&B entity (team or user; default: the logged-in user's)."""
    wandb_mode: Literal["online", "offline"] = "online"
    """W&B mode: offline writes the run under <run>/wandb for a later `wandb sync`."""
    mlflow_tracking_uri: str | None = None
    """MLflow tracking server or database (default: sqlite:///<run_root>/mlflow.db, shared by the
    runs under run_root)."""
    progress_bar: bool = True
    """Show a tqdm progress bar."""
    strategy: Literal["single", "fsdp2", "deepspeed", "ulysses"] = "single"
    """How the policy trains: "single" (this process), "fsdp2" (data parallel with FSDP2 over
    trainer.num_processes ranks, gloo on CPU), "deepspeed" (DeepSpeed ZeRO trainer.zero_stage over
    the ranks; extra `deepspeed`) or "ulysses" (sequence parallel: every micro-batch's packed
    sequence split over trainer.num_processes ranks; needs optim.packing). Rank 0 generates."""
    plan: str = "sync"
    """Execution plan: sync, one_step_off (step n+1 generates while step n updates), fully_async
    (generation never waits, within trainer.max_staleness), or a registered one."""
    plan_params: dict[str, Any] = {}
    """Settings of the selected plan, when it declared its own (``@register_plan(name, params=...)``):
    trainer.plan_params.<key>=value, checked before the model loads."""
    max_staleness: NonNegativeInt = 1
    """fully_async: most policy versions a trained sample may lag the policy it updates."""
    zero_stage: Literal[1, 2, 3] = 3
    """trainer.strategy=deepspeed: ZeRO stage (1 optimizer state, 2 + gradients, 3 + parameters
    partitioned over the ranks)."""
    num_processes: PositiveInt = 1
    """Training processes for a data-parallel strategy (each gets cores / num_processes threads)."""
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")
    """Where the policy, reference and critic, their optimizer state and batches live: auto (a GPU
    when torch sees one, one per local rank by LOCAL_RANK; else the CPU), cpu, cuda or cuda:N. The
    process-group backend follows it (NCCL on CUDA, gloo on the CPU), and so do bf16 autocast's
    device and the embedded hf engine's."""
    fsdp_mixed_precision: bool = False
    """trainer.strategy=fsdp2: bfloat16 parameters in forward and backward, gradients reduced in
    float32, float32 master weights (FSDP2's MixedPrecisionPolicy)."""
    fsdp_cpu_offload: bool = False
    """trainer.strategy=fsdp2 on GPUs: parameters, gradients and optimizer state sharded in CPU
    memory, each layer's moved to the GPU for its compute (FSDP2's CPUOffloadPolicy)."""
    num_threads: NonNegativeInt = 0
    """torch intra-op threads (0 = torch's default)."""
    imports: list[str] = []
    """Python modules imported before the run starts: they may register envs, estimators, losses."""


class PlacementConfig(Section):
    """Where the training processes and the engines run (docs/reference/design.md §5)."""

    backend: Literal["local", "ray"] = "local"
    """local: this process (and trainer.num_processes local ranks); ray: training processes and
    engines as Ray actors in placement groups, with this process driving the loop and the envs."""
    mode: Literal["colocated", "disaggregated"] = "colocated"
    """backend=ray. colocated: each engine shares a training process's bundle (its CPUs / GPU); the
    engine sleeps while the learner trains, the learner's state moves to CPU while the engine
    generates. disaggregated: engines get their own bundles (other devices or nodes)."""
    address: str | None = None
    """backend=ray: None starts a Ray instance on this machine bound to 127.0.0.1; "auto" joins the
    cluster this machine belongs to (after `ray start`), "ray://host:10001" a remote one."""
    num_engines: PositiveInt = 1
    """backend=ray: engine actors; the driver spreads requests over them (colocated: at most one per
    training process)."""
    training_cpus: PositiveInt = 1
    """backend=ray: CPUs per training process (its torch threads)."""
    engine_cpus: PositiveInt = 1
    """backend=ray, disaggregated: CPUs per engine (colocated engines use their bundle's)."""
    training_gpus: NonNegativeFloat = 0
    """backend=ray: GPUs per training bundle (0 on CPU machines)."""
    engine_gpus: NonNegativeFloat = 0
    """backend=ray, disaggregated: GPUs per engine bundle."""
    offload: bool = True
    """backend=ray, colocated: the learner's models and optimizer state move to CPU while engines
    generate, and the engines sleep while it trains. backend=local on a GPU with trainer.plan=sync:
    the learner and rank 0's embedded engine (hf, vllm, sglang) take turns on the GPU the same way."""
    lora_sync: Literal["adapter", "merged"] = "adapter"
    """How a LoRA policy reaches the engines: "adapter" sends the adapters alone (~1% of the bytes)
    to an engine that applies them itself (the embedded hf engine and vLLM, also on Ray; other
    engines get merged weights); "merged" always sends the full merged weights."""
    verify_sync: bool = False
    """After each weight sync, sample a probe completion from the engine and log the largest gap
    between its sampler logprobs and the trainer's (sync/logprob_max_gap; ~0 when the sync is exact
    and both run in float32)."""


class AloftConfig(Section):
    """A whole run. Presets live in aloft/config/presets/*.yaml."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    env: EnvConfig = EnvConfig()
    generator: GeneratorConfig = GeneratorConfig()
    engine: EngineConfig = EngineConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    optim: OptimConfig = OptimConfig()
    critic: CriticConfig = CriticConfig()
    trainer: TrainerConfig = TrainerConfig()
    placement: PlacementConfig = PlacementConfig()

    @field_validator("env", mode="before")
    @classmethod
    def _env_shorthand(cls, value: Any) -> Any:
        # `env=text2sql` on the command line is shorthand for `env.name=text2sql`.
        return {"name": value} if isinstance(value, str) else value

    def engine_options(self) -> dict[str, Any]:
        """Settings only the engine's backend takes, as constructor arguments: the section's own, and
        for vLLM the policy's LoRA rank when syncs send adapters alone (vLLM sizes LoRA at start)."""
        options = self.engine.backend_options()
        if self.engine.backend == "vllm" and self.model.lora_rank and self.placement.lora_sync == "adapter":
            options["max_lora_rank"] = self.model.lora_rank
        return options

    @model_validator(mode="after")
    def _check_consistency(self, info: ValidationInfo) -> AloftConfig:
        # A subcommand that reads a few settings (aloft eval) checks their values alone: it is not
        # a whole run, so the checks across sections (training data, placement) do not apply.
        if (info.context or {}).get("whole_run", True):
            check_consistency(self)
        return self
