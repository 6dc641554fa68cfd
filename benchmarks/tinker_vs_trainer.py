"""One RL task two ways: tinker-cookbook's minimal RL loop against ``aloft tinker-serve``, and
``aloft train``; reward by step and seconds per step, side by side, from one run.

The task is the loop's own: its GSM8K prompt (a few-shot example, then the question and "Provide a
numerical answer without units, written inside \\boxed{}.") over the offline gsm8k stand-in of
``aloft.tinker.cookbook`` (reasoning-gym one-digit sums), reward 1 when the last ``\\boxed{}`` holds
the right number, else 0. Held equal: SmolLM2-135M-Instruct, the same prompts in the same order,
``--batch`` prompts x ``--group`` samples a step at temperature 1 with at most ``--max-tokens`` new
tokens, rewards centred per group without a std division, one update a step on the whole batch,
LoRA rank 32 (alpha 32) on the attention and MLP projections, AdamW at ``--lr`` with betas (0.9,
0.95) and no gradient clipping.

Not equal, by design of each side: the Tinker side is the recipe as written (``loss_fn=
importance_sampling``, a token sum; its LoRA also adapts the output head, as Tinker's does; the
prompt in the cookbook's ``qwen3_instruct`` rendering of ChatML, with no system line; the server
samples, then trains through HTTP and the SDK's futures). The aloft side is the trainer with its
defaults (``policy_loss=ppo``, clip 0.2, on one on-policy epoch the same gradient as the IS loss;
SmolLM2's chat template, which adds its default system line; shared prompts in the update; weights
synced to the embedded engine after each step).

Seconds per step are each side's own: the recipe's ``time/total`` (sampling, scoring, training, the
sampler save) and the trainer's ``timing/step_s`` (generation, scoring, update, weight sync). The
two sides run one after the other on the same machine; the first step of each includes warm-up.

    python benchmarks/tinker_vs_trainer.py                       # 10 steps a side (15-35 min on 2 cores)
    python benchmarks/tinker_vs_trainer.py --steps 2 --batch 2 --group 4 --max-tokens 16   # a smoke run
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

import httpx

from aloft.distributed import free_loopback_port
from aloft.tinker.cookbook import RL_LOOP_FEW_SHOT, RL_LOOP_SUFFIX, gsm8k_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

LORA_MODULES = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_tinker_loop(args: argparse.Namespace, work: Path) -> list[dict]:
    """tinker-serve as a process, then the recipe through ``aloft.tinker.cookbook``; its metrics."""
    port = free_loopback_port()
    log = (work / "tinker-serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "aloft.cli", "tinker-serve", "--model", args.model, "--port", str(port),
         "--checkpoint-dir", str(work / "tinker-checkpoints")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/api/v1/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tinker-serve did not start; see {work / 'tinker-serve.log'}")
            time.sleep(0.5)
        recipe = [
            sys.executable, "-m", "aloft.tinker.cookbook", "tinker_cookbook.recipes.rl_loop",
            f"base_url={url}", f"model_name={args.model}", "loss_fn=importance_sampling",
            f"batch_size={args.batch}", f"group_size={args.group}", f"max_tokens={args.max_tokens}",
            f"max_steps={args.steps}", f"learning_rate={args.lr}", "lora_rank=32", "save_every=0",
            f"log_path={work / 'rl_loop'}",
        ]  # fmt: skip
        with (work / "rl_loop.log").open("w") as out:
            subprocess.run(recipe, check=True, stdout=out, stderr=subprocess.STDOUT)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return [
        {"step": r["step"], "reward": r["reward/total"], "seconds": r["time/total"]}
        for r in read_jsonl(work / "rl_loop" / "metrics.jsonl")
    ]


def run_aloft_trainer(args: argparse.Namespace, work: Path) -> list[dict]:
    """``aloft train`` on rows holding the loop's conversation; its metrics."""
    rows = work / "rows.jsonl"
    with rows.open("w") as out:
        for index, row in enumerate(gsm8k_rows("train")[: args.steps * args.batch]):
            answer = row["answer"].rsplit("#### ", 1)[1]
            prompt = [*RL_LOOP_FEW_SHOT, {"role": "user", "content": row["question"] + RL_LOOP_SUFFIX}]
            out.write(
                json.dumps(
                    {"prompt": prompt, "env_class": "math", "answer": answer, "extra_info": {"index": index}}
                )
                + "\n"
            )
    overrides = [
        f"model.path={args.model}", "model.lora_rank=32", "model.lora_alpha=32", f"model.lora_target_modules={LORA_MODULES}",
        f"data.train_files=[{rows}]", "data.shuffle=false", "env.name=math",
        "env.config={answer_format: boxed, format_reward: 0.0, correct_reward: 1.0}",
        f"generator.n_samples={args.group}", f"generator.max_new_tokens={args.max_tokens}",
        f"generator.max_total_tokens={args.max_tokens}", "generator.temperature=1.0",
        "algorithm.advantage=grpo", "algorithm.norm_adv_by_std=false", "algorithm.policy_loss=ppo",
        f"optim.lr={args.lr}", "optim.betas=[0.9,0.95]", "optim.max_grad_norm=0",
        f"trainer.max_steps={args.steps}", f"trainer.prompts_per_step={args.batch}",
        "trainer.eval_before_training=false", "trainer.eval_every=0", "trainer.checkpoint_every=0",
        "trainer.export_final=false", "trainer.loggers=[jsonl]", "trainer.progress_bar=false",
        f"trainer.run_root={work}", "trainer.name=aloft",
    ]  # fmt: skip
    with (work / "aloft_train.log").open("w") as out:
        subprocess.run(
            [sys.executable, "-m", "aloft.cli", "train", *overrides],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    steps = [r for r in read_jsonl(work / "aloft" / "metrics.jsonl") if "timing/step_s" in r]
    return [{"step": r["step"] - 1, "reward": r["reward/mean"], "seconds": r["timing/step_s"]} for r in steps]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="built-in name or HF directory")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8, help="prompts a step")
    parser.add_argument("--group", type=int, default=8, help="samples a prompt")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the logs and runs here (default: a temp dir, deleted at the end: ~300 MB a full run)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work = args.work or Path(tempfile.mkdtemp(prefix="tinker-vs-trainer-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        tinker_steps = run_tinker_loop(args, work)
        aloft_steps = run_aloft_trainer(args, work)
    finally:
        if args.work is None:  # nobody asked to keep them
            shutil.rmtree(work, ignore_errors=True)

    tinker_s = statistics.median(r["seconds"] for r in tinker_steps)
    aloft_s = statistics.median(r["seconds"] for r in aloft_steps)
    half = max(1, len(tinker_steps) // 2)
    figures = {
        "steps": args.steps,
        "tinker_loop": tinker_steps,
        "aloft_train": aloft_steps,
        "median_step_s": {"tinker_loop": tinker_s, "aloft_train": aloft_s, "ratio": tinker_s / aloft_s},
        "mean_reward_second_half": {
            "tinker_loop": statistics.fmean(r["reward"] for r in tinker_steps[half:]),
            "aloft_train": statistics.fmean(r["reward"] for r in aloft_steps[half:]),
        },
    }
    by_step = {r["step"]: r for r in aloft_steps}
    rows = []
    for t in tinker_steps:
        a = by_step.get(t["step"], {"reward": None, "seconds": None})  # a step the trainer did not log
        rows.append([t["step"], t["reward"], a["reward"], t["seconds"], a["seconds"]])
    second_half = figures["mean_reward_second_half"]
    tables = [
        Table(
            ["step", "tinker loop reward", "aloft train reward", "tinker loop s", "aloft train s"],
            rows,
            ["{}", "{:.3f}", "{:.3f}", "{:.1f}", "{:.1f}"],
            title=f"RL on the gsm8k stand-in, {args.model}, {args.batch} x {args.group} a step, lr {args.lr}",
        ),
        Table(
            ["tinker loop", "aloft train", "tinker loop / aloft train"],
            [[tinker_s, aloft_s, tinker_s / aloft_s]],
            ["{:.1f}", "{:.1f}", "{:.2f}"],
            title="median seconds a step",
        ),
        Table(
            ["tinker loop", "aloft train"],
            [[second_half["tinker_loop"], second_half["aloft_train"]]],
            ["{:.3f}", "{:.3f}"],
            title="mean reward, second half of the steps",
        ),
    ]
    if args.work is not None:
        print(f"\n(logs and runs kept in {work})")
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "tinker_vs_trainer", command_line(__file__, argv), figures, tables)


if __name__ == "__main__":
    main()
