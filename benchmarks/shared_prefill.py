"""Text-to-SQL eval prompts: the hf engine prefilling each prompt whole against prefilling shared beginnings once.

Run from the repo root::

    python benchmarks/shared_prefill.py                       # Qwen2.5-Coder-0.5B, 64 held-out questions
    python benchmarks/shared_prefill.py --model tiny --questions 8 --max-tokens 4   # seconds

A SkyRL-SQL eval (or a training step) admits many questions at once, and their prompts begin alike:
one system message for all, then one schema per database, then the question. This benchmark builds
``--questions`` held-out rows of ``aloft data build sql`` (real schemas, two databases), makes each
row's first-turn prompt with the rollout generator's own chat template code, and generates greedily
``--max-tokens`` tokens per question twice with the same engine settings but one:
``min_shared_prefix=0`` (every prompt prefilled whole, the engine before ``aloft.inference.prefix_tree``)
and the default (shared beginnings prefilled once). Printed: prompt tokens run through the model,
prefill seconds (admission, as the engine's stats time it), total seconds, whether the two sampled
the same tokens, the largest logprob difference between them, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from aloft.data import build_dataset, validate_row
from aloft.inference.hf import HFEngine
from aloft.inference.prefix_tree import MIN_SHARED_TOKENS
from aloft.rollout.generator import ChatFormatter
from aloft.types import GenerationRequest, SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info
from multiturn import load_sql_model
from result_tables import Table, command_line, write_results


def run(
    model: Any, tokenizer: Any, prompts: list[list[int]], max_tokens: int, min_shared: int
) -> dict[str, Any]:
    engine = HFEngine(model, tokenizer, dtype=model.dtype, prefix_cache_gb=0, min_shared_prefix=min_shared)
    requests = [
        GenerationRequest(prompt_ids=p, sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0))
        for p in prompts
    ]
    try:
        started = time.perf_counter()
        completions = asyncio.run(engine.generate(requests))
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    sampled = json.dumps([c.token_ids for c in completions]).encode()
    return {
        "min_shared_prefix": min_shared,
        "prefilled_tokens": engine.stats.prefilled_tokens,
        "prefill_seconds": engine.stats.prefill_seconds,
        "seconds": seconds,
        "completion_tokens": sum(len(c.token_ids) for c in completions),
        "completion_sha256": hashlib.sha256(sampled).hexdigest(),  # equal digests: the same tokens
        "logprobs": [c.logprobs for c in completions],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="qwen2.5-coder-0.5b-instruct", help="built-in name, directory, or 'tiny'"
    )
    parser.add_argument("--questions", type=int, default=64, help="held-out questions admitted together")
    parser.add_argument("--max-tokens", type=int, default=16, help="greedy tokens per question")
    parser.add_argument(
        "--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="auto: the CPU's fast dtype"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    model, tokenizer = load_sql_model(
        args.model, None if args.dtype == "auto" else getattr(torch, args.dtype)
    )
    raw = build_dataset("sql", n=args.questions, seed=0, split="heldout", max_turns=1)
    rows = [validate_row(row, i, "sql") for i, row in enumerate(raw)]
    chat = ChatFormatter(tokenizer)  # the rollout generator's own prompt tokens
    prompts = [chat.prompt_ids(row.prompt) for row in rows]
    whole, shared = (run(model, tokenizer, prompts, args.max_tokens, m) for m in (0, MIN_SHARED_TOKENS))
    gap = max(
        (abs(a - b) for x, y in zip(whole.pop("logprobs"), shared.pop("logprobs")) for a, b in zip(x, y)),
        default=0.0,
    )
    figures = {
        "benchmark": "shared_prefill",
        "model": args.model,
        "dtype": str(model.dtype).removeprefix("torch."),
        "machine": machine_info(),
        "questions": len(prompts),
        "databases": sorted({str(row.extras.get("db_id")) for row in rows}),
        "prompt_tokens": sum(len(p) for p in prompts),
        "max_tokens": args.max_tokens,
        "rows": [whole, shared],
        "same_tokens": whole["completion_sha256"] == shared["completion_sha256"],
        "largest_logprob_gap": gap,
        "prefill_token_ratio": whole["prefilled_tokens"] / max(shared["prefilled_tokens"], 1),
        "prefill_time_ratio": whole["prefill_seconds"] / max(shared["prefill_seconds"], 1e-9),
        "time_ratio": whole["seconds"] / max(shared["seconds"], 1e-9),
    }
    tables = [
        Table(
            ["hf engine", "tokens prefilled", "prefill s", "total s"],
            [
                [label, row["prefilled_tokens"], row["prefill_seconds"], row["seconds"]]
                for label, row in (("each prompt whole", whole), ("shared beginnings once", shared))
            ],
            ["{}", "{:,}", "{:.1f}", "{:.1f}"],
            title=f"text-to-SQL prompts: {args.model} ({figures['dtype']}), {len(prompts)} held-out questions "
            f"({figures['prompt_tokens']:,} prompt tokens) admitted together, {args.max_tokens} greedy tokens each",
        ),
        Table(
            ["tokens prefilled", "prefill s", "total s", "same tokens", "largest logprob gap"],
            [
                [
                    figures["prefill_token_ratio"],
                    figures["prefill_time_ratio"],
                    figures["time_ratio"],
                    "yes" if figures["same_tokens"] else "no",
                    gap,
                ]
            ],
            ["{:.1f}x", "{:.2f}x", "{:.2f}x", "{}", "{:.1e}"],
            title="ratio (whole / shared once)",
        ),
    ]
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "shared_prefill", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
