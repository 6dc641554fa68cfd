"""Seconds per GRPO step: aloft against TRL's GRPOTrainer, same model, prompts, geometry, reward and settings.

Run from the repo root::

    python benchmarks/grpo_step_vs_trl.py                       # tiny model and SmolLM2-135M, few steps
    python benchmarks/grpo_step_vs_trl.py --models tiny         # about a minute or two on 2 cores
    python benchmarks/grpo_step_vs_trl.py --models tiny,smollm2 --steps 10 --precisions fp32,bf16 --json out.json

What is held equal. Both frameworks train the same HF model directory (fp32 master weights) on the same
arithmetic rows in the same order (no shuffling), so step k sees the same 8 prompts on both sides, each
sampled ``--samples`` times for at most ``--max-new-tokens`` tokens at temperature 0.7, top-p 1, top-k off;
both score completions with aloft's ``arithmetic`` env (0.5 format + 0.5 correct), use group-normalised
advantages (GRPO), the PPO clipped loss (eps 0.2) averaged over all completion tokens (TRL's ``dapo``,
aloft's ``token_mean``), no KL term and no reference model (TRL ``beta=0``, aloft ``kl_coef=0``), one
optimizer step per batch (TRL ``num_iterations=1``, ``gradient_accumulation_steps=1``, so neither side
recomputes old logprobs), one micro-batch holding the whole batch (aloft packs it: ``optim.packing=auto``, the default), AdamW with a constant learning rate and
grad-norm clipping at 1, and no gradient checkpointing (TRL turns it on by default; aloft does not).

Precision. ``fp32`` runs everything in float32 (TRL ``bf16=False``; aloft ``engine.dtype=float32``,
``optim.bf16_autocast=false``). ``bf16`` is aloft's quick-start setting (bfloat16 engine weights, bfloat16
autocast in training) against TRL ``bf16=True`` (accelerate wraps the model's forward in bfloat16 autocast,
so TRL generates under autocast too). On CPUs without native bfloat16 matmul (no AVX512_BF16 / AMX) both
sides run many times slower in bf16 than in fp32 (on a 2-core AVX2 EPYC, the tiny model's training step
took ~27x longer), so ``auto`` (the default) runs fp32, and adds bf16 only where this machine's bf16
matmul is at least as fast as its fp32 matmul.

Timing. Each (framework, model, precision) runs in a fresh child process so neither framework's imports,
thread pools or accelerate state leak into the other. TRL: wall time from ``on_step_begin`` to
``on_step_end`` (a ``TrainerCallback``; generation, reward, loss, backward and the optimizer step all
happen in between). aloft: the trainer's own ``timing/step_s`` (rollout + train + weight sync), with its
``timing/generate_s`` / ``timing/train_s`` / ``timing/sync_s`` split. The first ``--warmup`` steps of each
run are excluded; the figure is the mean over the measured steps.

FLOP/s. aloft's training FLOP/s counts the model FLOPs its update computes, forward and backward
(``model_flops.packed_update_flops``, which lays each step's batch out with the trainer's own packing)::

    train_FLOPs = 6 * N_body * positions + 6 * V * d * completion tokens + 12 * L * H * h_d * keys
    train_FLOP/s = train_FLOPs / timing/train_s

with ``N_body`` the parameters outside the token-embedding / LM-head matrices (the embedding is a lookup,
and the LM head runs on completion tokens only), ``V * d`` the LM-head size, positions the packed rows'
tokens (a group's shared prompt once, every completion) and keys the (query, key) pairs attention
scores, a completion's over its shared prompt included. ``% matmul peak`` is that rate over this
machine's measured ``torch.matmul`` FLOP/s in the training dtype (bf16 when autocast is on), on the
device aloft trains on; a rate above it prints ``n/a: probe below the update``, never a share over
100% (the 1024 x 1024 probe then ran slower than the model's own matmuls, so it bounds nothing:
``benchmarks/limits.py`` measures those). ``useful TFLOP/s as if unshared`` is the same update's
rate had every row run its own copy of its prompt (what counting every row's prompt tokens gives):
useful work, but not work the update did, so it is not a share of anything. On SmolLM2's chat-templated arithmetic prompts (37 tokens), 4
samples a prompt, it is 1.5x the real rate at 32-token completions and 2.3x at 9-token ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_flops import ModelShape, UpdateFlops, packed_update_flops, peak_share
from result_tables import Table, command_line, write_results

MODELS = ("tiny", "smollm2")
PRECISIONS = ("fp32", "bf16")
DEFAULT_MEASURED_STEPS = {"tiny": 5, "smollm2": 3}
SMOLLM2 = "smollm2-135m-instruct"
TINY_SHAPE = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2}
"""2,459,904 parameters: the size of the issue's TRL reference point (0.24 s/step for 8 completions x 32 tokens)."""
RESULT_PREFIX = "BENCH_RESULT "
TEMPERATURE = 0.7
LEARNING_RATE = 2e-5  # the quick-start preset's


# ---------------------------------------------------------------------------------------------------
# This machine's matmul FLOP/s
# ---------------------------------------------------------------------------------------------------


def matmul_flops(size: int, dtype_name: str, min_seconds: float = 1.0, max_reps: int = 10) -> float:
    """Best FLOP/s of ``torch.matmul`` on [size, size] matrices (2 * size^3 FLOPs a product), on the
    GPU where there is one (where both frameworks train, as ``trainer.device=auto`` and TRL pick),
    else on the CPU.

    Both layouts are timed, ``a @ b`` and ``a @ b.T`` (what ``nn.Linear`` computes), and the faster one
    counts: on CPUs without native bfloat16, oneDNN's bf16 kernel for ``a @ b`` is ~10x slower than for
    ``a @ b.T``, and only the latter is what a transformer's linear layers run.
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None  # GPU products run asynchronously
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    best = float("inf")
    for right in (b, b.T):
        torch.matmul(a, right)  # warm-up: thread pool, kernel selection
        sync()
        spent, reps = 0.0, 0
        while reps < max_reps and (spent < min_seconds or reps < 2):
            start = time.perf_counter()
            torch.matmul(a, right)
            sync()
            elapsed = time.perf_counter() - start
            best, spent, reps = min(best, elapsed), spent + elapsed, reps + 1
    return 2 * size**3 / best


# ---------------------------------------------------------------------------------------------------
# Workers (each runs in its own process: python benchmarks/grpo_step_vs_trl.py --worker SPEC)
# ---------------------------------------------------------------------------------------------------


def record_updates(policy: Any) -> list[tuple[Any, list[list[int]]]]:
    """Every ``(batch, mini_batches)`` the policy's ``update`` is called with, in call order, to
    count each step's FLOPs after the run. Only references are kept: the timed update is unchanged."""
    calls: list[tuple[Any, list[list[int]]]] = []
    update = policy.update

    def recording(batch: Any, *args: Any, mini_batches: list[list[int]], **kwargs: Any) -> Any:
        calls.append((batch, mini_batches))
        return update(batch, *args, mini_batches=mini_batches, **kwargs)

    policy.update = recording
    return calls


def step_flops(policy: Any, shape: ModelShape, batch: Any, mini_batches: list[list[int]]) -> UpdateFlops:
    """``UpdateFlops`` of one step's update, micro-batched as the policy cut it (``PolicyWorker.update``)."""
    if not policy.settings.packing:
        raise RuntimeError(
            "aloft trained padded micro-batches (optim.packing resolved to false): the FLOP count "
            "models the packed update this benchmark sets up (optim.packing=auto on a plain-causal model)"
        )
    micro_batching = policy.settings.micro_batching
    micro = [chunk for rows in mini_batches for chunk in micro_batching.split(batch, rows)]
    return packed_update_flops(shape, batch, micro, policy.share_prompts, micro_batching.min_shared_prefix)


def run_aloft(spec: dict[str, Any]) -> dict[str, Any]:
    from aloft.config import load_config
    from aloft.tracking import read_metrics
    from aloft.trainer import Trainer

    bf16 = spec["precision"] == "bf16"
    batch = spec["prompts"] * spec["samples"]
    cfg = load_config(
        "quickstart",
        [
            f"model.path={spec['aloft_model']}",
            f"data.train_files=[{spec['rows_file']}]",
            "data.eval_size=0",
            "data.shuffle=false",
            f"generator.n_samples={spec['samples']}",
            f"generator.max_new_tokens={spec['max_new_tokens']}",
            f"generator.max_total_tokens={spec['max_new_tokens']}",
            f"generator.temperature={TEMPERATURE}",
            "generator.top_p=1.0",
            "generator.top_k=0",
            f"engine.dtype={'bfloat16' if bf16 else 'float32'}",
            f"engine.max_batch_size={batch}",
            f"optim.lr={LEARNING_RATE}",
            "optim.schedule=constant",
            "optim.max_grad_norm=1.0",
            f"optim.micro_batch_size={batch}",
            # Packed by default (optim.packing=auto): a token budget no batch reaches keeps one micro-batch.
            f"optim.micro_batch_tokens={batch * 4096}",
            f"optim.bf16_autocast={str(bf16).lower()}",
            # TRL's GRPOTrainer: one generation round, symmetric clip (epsilon_high = epsilon = 0.2).
            "algorithm.advantage=grpo",
            "algorithm.policy_loss=ppo",
            "algorithm.dynamic_sampling=false",
            "algorithm.clip_low=0.2",
            "algorithm.clip_high=0.2",
            "algorithm.kl_coef=0.0",
            "algorithm.ppo_epochs=1",
            "algorithm.mini_batches=1",
            "algorithm.loss_reduction=token_mean",
            f"trainer.run_root={spec['work_dir']}",
            "trainer.name=aloft",
            f"trainer.max_steps={spec['steps']}",
            f"trainer.prompts_per_step={spec['prompts']}",
            "trainer.eval_before_training=false",
            "trainer.eval_every=0",
            "trainer.checkpoint_every=0",
            "trainer.export_final=false",
            "trainer.save_rollouts=false",
            "trainer.progress_bar=false",
            "trainer.loggers=[jsonl]",
        ],
    )
    trainer = Trainer(cfg)
    policy = trainer.c.policy
    updates = record_updates(policy)
    # The last step always writes a checkpoint (checkpoint_every only sets the period); it happens after
    # the last step's timings are taken, so it costs wall time here but is not in any figure.
    trainer.fit()
    shape = ModelShape.of(policy.model)
    steps = [r for r in read_metrics(trainer.c.run_dir / "metrics.jsonl") if "timing/step_s" in r]
    out = []
    for r, (train_batch, mini_batches) in zip(steps, updates, strict=True):  # one update a step
        flops = step_flops(policy, shape, train_batch, mini_batches)
        out.append(
            {
                "step_s": r["timing/step_s"],
                "generate_s": r["timing/generate_s"],
                "train_s": r["timing/train_s"],
                "sync_s": r["timing/sync_s"],
                "tokens": flops.row_tokens,
                "positions": flops.positions,
                "completion_tokens": r["completion/mean_len"] * batch,
                "train_flops": flops.computed,
                "unshared_train_flops": flops.unshared,
                "reward": r["reward/mean"],
            }
        )
    return {"steps": out, "n_params": sum(p.numel() for p in policy.model.parameters())}


def arithmetic_reward(text: str, answer: str) -> float:
    """The reward aloft's generator would give: one episode of the ``arithmetic`` env on ``text``."""
    from aloft import gym

    env = gym.make("arithmetic", extras={"answer": answer})
    env.reset([])  # the arithmetic env ignores the prompt
    return env.step(text).reward


def run_trl(spec: dict[str, Any]) -> dict[str, Any]:
    import datasets
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(line) for line in Path(spec["rows_file"]).read_text().splitlines() if line.strip()]
    dataset = datasets.Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    completion_lengths: dict[int, list[int]] = {}
    rewards: dict[int, list[float]] = {}

    def arithmetic(
        completions: list[Any],
        completion_ids: list[list[int]],
        answer: list[str],
        trainer_state: Any,
        **_: Any,
    ) -> list[float]:
        step = trainer_state.global_step + 1  # global_step counts finished optimizer steps
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = [arithmetic_reward(text, a) for text, a in zip(texts, answer)]
        completion_lengths.setdefault(step, []).extend(len(ids) for ids in completion_ids)
        rewards.setdefault(step, []).extend(scores)
        return scores

    step_seconds: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step_seconds.append(time.perf_counter() - self.started)

    batch = spec["prompts"] * spec["samples"]
    args = GRPOConfig(
        output_dir=str(Path(spec["work_dir"]) / "trl"),
        use_cpu=not torch.cuda.is_available(),  # the GPU where there is one, as aloft's trainer.device=auto
        bf16=spec["precision"] == "bf16",
        fp16=False,
        model_init_kwargs={"dtype": "float32"},
        # One optimizer step = one generation batch = prompts x samples completions.
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=spec["samples"],
        num_iterations=1,
        max_steps=spec["steps"],
        max_completion_length=spec["max_new_tokens"],
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        shuffle_dataset=False,
        seed=0,
        report_to="none",
        save_strategy="no",
        logging_steps=spec["steps"] + 1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=spec["model_path"],
        reward_funcs=arithmetic,
        args=args,
        train_dataset=dataset,
        callbacks=[StepTimer()],
    )
    # Diagnostics only: time TRL's generation (tokenize, model.generate, decode) by wrapping its private
    # `_generate`; if a TRL release renames it, the split is reported as unknown and the step times stand.
    generate_seconds: dict[int, float] = {}
    generate = getattr(trainer, "_generate", None)
    if generate is not None:

        def timed_generate(*call_args: Any, **call_kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return generate(*call_args, **call_kwargs)
            finally:
                step = trainer.state.global_step + 1
                generate_seconds[step] = generate_seconds.get(step, 0.0) + time.perf_counter() - started

        trainer._generate = timed_generate
    trainer.train()
    out = []
    for index, seconds in enumerate(step_seconds, start=1):
        lengths = completion_lengths.get(index, [])
        out.append(
            {
                "step_s": seconds,
                "generate_s": generate_seconds.get(index, float("nan")),
                "completion_tokens": float(sum(lengths)),
                "reward": statistics.fmean(rewards[index]) if rewards.get(index) else float("nan"),
            }
        )
    return {
        "steps": out,
        "n_params": sum(p.numel() for p in trainer.model.parameters()),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
    }


def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = run_trl(spec) if spec["framework"] == "trl" else run_aloft(spec)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------


def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one (framework, model, precision) in a child process; return its parsed result."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    raise RuntimeError(f"{spec['framework']} worker failed (exit {proc.returncode}):\n{tail}")


def summarize(
    model: str,
    precision: str,
    args: argparse.Namespace,
    trl: dict[str, Any],
    aloft: dict[str, Any],
    peak: dict[str, float],
) -> dict[str, Any]:
    """One table row: means over the measured steps of both runs, and aloft's achieved FLOP/s."""
    warmup, batch = args.warmup, args.prompts * args.samples
    trl_steps, aloft_steps = trl["steps"][warmup:], aloft["steps"][warmup:]
    if not trl_steps or not aloft_steps:
        raise RuntimeError(
            f"{model}/{precision}: no measured steps (TRL ran {len(trl['steps'])}, aloft {len(aloft['steps'])})"
        )

    def mean(steps: list[dict[str, Any]], key: str) -> float:
        return statistics.fmean(s[key] for s in steps)

    trl_s, aloft_s, train_s = (
        mean(trl_steps, "step_s"),
        mean(aloft_steps, "step_s"),
        mean(aloft_steps, "train_s"),
    )
    train_s_total = sum(s["train_s"] for s in aloft_steps)
    flops_per_s = sum(s["train_flops"] for s in aloft_steps) / train_s_total
    unshared_per_s = sum(s["unshared_train_flops"] for s in aloft_steps) / train_s_total
    return {
        "model": model,
        "precision": precision,
        "geometry": f"{args.prompts}x{args.samples}x{args.max_new_tokens}",
        "n_params": aloft["n_params"],
        "measured_steps": len(aloft_steps),
        "trl_s_per_step": trl_s,
        "aloft_s_per_step": aloft_s,
        "ratio_aloft_over_trl": aloft_s / trl_s,
        "trl_generate_s": mean(trl_steps, "generate_s"),
        "aloft_generate_s": mean(aloft_steps, "generate_s"),
        "aloft_train_s": train_s,
        "aloft_sync_s": mean(aloft_steps, "sync_s"),
        "trl_mean_completion_len": mean(trl_steps, "completion_tokens") / batch,
        "aloft_mean_completion_len": mean(aloft_steps, "completion_tokens") / batch,
        "trl_mean_reward": mean(trl_steps, "reward"),
        "aloft_mean_reward": mean(aloft_steps, "reward"),
        "aloft_train_flops_per_s": flops_per_s,
        "aloft_fraction_of_matmul_peak": flops_per_s / peak[precision],
        "matmul_peak_flops_per_s": peak[precision],
        "aloft_unshared_flops_per_s": unshared_per_s,
        "trl_mixed_precision": trl.get("mixed_precision"),
        "trl_step_times_s": [s["step_s"] for s in trl["steps"]],
        "aloft_step_times_s": [s["step_s"] for s in aloft["steps"]],
    }


COLUMNS = [
    ("model", "model", "{}"),
    ("prec", "precision", "{}"),
    ("geometry", "geometry", "{}"),
    ("trl s/step", "trl_s_per_step", "{:.3f}"),
    ("aloft s/step", "aloft_s_per_step", "{:.3f}"),
    ("aloft/trl", "ratio_aloft_over_trl", "{:.2f}"),
    ("trl gen s", "trl_generate_s", "{:.3f}"),
    ("aloft gen s", "aloft_generate_s", "{:.3f}"),
    ("aloft train s", "aloft_train_s", "{:.3f}"),
    ("aloft sync s", "aloft_sync_s", "{:.3f}"),
    ("len trl", "trl_mean_completion_len", "{:.1f}"),
    ("len aloft", "aloft_mean_completion_len", "{:.1f}"),
    ("aloft computed TFLOP/s", lambda r: r["aloft_train_flops_per_s"] / 1e12, "{:.4f}"),
    # The share of the peak, n/a where the probe bounds nothing (peak_share): text, not a number.
    ("% matmul peak", lambda r: peak_share(r["aloft_train_flops_per_s"], r["matmul_peak_flops_per_s"]), "{}"),
    ("useful TFLOP/s as if unshared", lambda r: r["aloft_unshared_flops_per_s"] / 1e12, "{:.4f}"),
]
"""(title, key of a ``summarize`` row or function of it, format) of each column of the results table."""


def results_table(results: list[dict[str, Any]]) -> Table:
    return Table.of_records(COLUMNS, results)


def format_table(results: list[dict[str, Any]]) -> str:
    return results_table(results).text()


TABLE_NOTE = (
    "\ngeometry = prompts x samples x max new tokens; s/step = mean over measured steps (warm-up excluded); "
    "len = mean completion tokens;\naloft computed TFLOP/s = FLOPs the update computed / train s: (6 N_body "
    "positions + 6 V d completion tokens + 12 L H h_d attended keys), a group's prompt once;\n"
    "% matmul peak = that over the precision's matmul FLOP/s above (n/a where the update ran faster: "
    "the probe then bounds nothing);\nuseful TFLOP/s as if unshared = the same update counting every "
    "row's own prompt: useful work, not work done, and no share of the peak."
)


def precisions_for(choice: str, peak: dict[str, float]) -> list[str]:
    """``auto``: fp32, plus bf16 where bf16 matmul is native here (at least as fast as fp32)."""
    if choice != "auto":
        return choice.split(",")
    return ["fp32", "bf16"] if peak["bf16"] >= peak["fp32"] else ["fp32"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2 (default: both)"
    )
    parser.add_argument(
        "--precisions",
        default="auto",
        help="auto (default), or comma-separated fp32, bf16 (see the module docstring)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="measured steps per run (default: 5 for tiny, 3 for smollm2)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="leading steps of each run left out of the figures"
    )
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt (the GRPO group size)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="completion token budget")
    parser.add_argument(
        "--matmul-size", type=int, default=1024, help="matrix size for the matmul FLOP/s probe"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument(
        "--smollm2-dir",
        default=None,
        help="a model directory to run as the smollm2 entry (default: the built-in SmolLM2-135M-Instruct; "
        "scripts/gpu_check.py passes a random-weight model of its shapes)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch directory (run dirs, tiny model)"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {unknown}; choose from {list(MODELS)}")
    if args.precisions != "auto" and not set(args.precisions.split(",")) <= set(PRECISIONS):
        parser.error(f"--precisions: use auto or a comma-separated subset of {list(PRECISIONS)}")
    if args.steps is not None and args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker is not None:
        worker_main(args.worker)
        return

    import torch

    from aloft.data import build_dataset, write_rows
    from aloft.models import build_tiny_model, resolve_model_path

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; measuring matmul FLOP/s "
        f"({'cuda' if torch.cuda.is_available() else 'cpu'}) ...",
        flush=True,
    )
    peak = {name: matmul_flops(args.matmul_size, name) for name in PRECISIONS}
    n = args.matmul_size
    peak_table = Table(
        [f"{n}x{n} matmul", *PRECISIONS],
        [["GFLOP/s", *(peak[name] / 1e9 for name in PRECISIONS)]],
        ["{}"] + ["{:.1f}"] * len(PRECISIONS),
    )
    print(peak_table, flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-grpo-"))
    geometry = f"{args.prompts}x{args.samples}x{args.max_new_tokens}"
    results = []
    try:
        for model in args.models.split(","):
            measured = args.steps or DEFAULT_MEASURED_STEPS[model]
            steps = args.warmup + measured
            rows_file = scratch / model / "rows.jsonl"
            write_rows(rows_file, build_dataset("arithmetic", n=steps * args.prompts, seed=0))
            if model == "tiny":
                model_path = build_tiny_model(scratch / model / "model", **TINY_SHAPE)
                aloft_model = model_path
            else:
                named = args.smollm2_dir or SMOLLM2
                model_path, aloft_model = resolve_model_path(named), named
            for precision in precisions_for(args.precisions, peak):
                runs = {}
                for framework in ("trl", "aloft"):
                    started = time.perf_counter()
                    print(
                        f"{model} {precision} {geometry}: {framework}, {steps} steps ...", end=" ", flush=True
                    )
                    runs[framework] = run_worker(
                        {
                            "framework": framework,
                            "model_path": model_path,
                            "aloft_model": aloft_model,
                            "rows_file": str(rows_file),
                            "work_dir": str(scratch / model / precision / framework),
                            "precision": precision,
                            "prompts": args.prompts,
                            "samples": args.samples,
                            "max_new_tokens": args.max_new_tokens,
                            "steps": steps,
                        }
                    )
                    print(f"{time.perf_counter() - started:.0f} s", flush=True)
                results.append(summarize(model, precision, args, runs["trl"], runs["aloft"], peak))
    finally:
        if args.keep:
            print(f"scratch kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    table = results_table(results)
    print()
    print(table)
    print(TABLE_NOTE)
    if args.json is not None:
        figures = {
            "benchmark": "grpo_step_vs_trl",
            "torch_threads": torch.get_num_threads(),
            "matmul_size": args.matmul_size,
            "matmul_flops_per_s": peak,
            "warmup_steps": args.warmup,
            "results": results,
        }
        write_results(
            args.json, "grpo_step_vs_trl", command_line(__file__, argv), figures, [table, peak_table]
        )
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
