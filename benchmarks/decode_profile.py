"""Where the hf engine's decode time goes at the GRPO shape: the first question of the engine-speed work.

Run from the repo root::

    python benchmarks/decode_profile.py                                   # SmolLM2-135M, every dtype this CPU runs natively
    python benchmarks/decode_profile.py --models tiny --new-tokens 16     # seconds
    python benchmarks/decode_profile.py --json benchmarks/results/decode_profile.json

The workload is ``rollout_throughput.py``'s GRPO shape: ``--prompts`` random-token prompts of
``--prompt-tokens`` tokens x ``--samples`` samples (8 x 8 = 64 rows decoding at once), ``--new-tokens``
generated per row (EOS ignored), temperature 0.7. After a warm-up call, two passes over the same work:

1. **Timed** (no profiler, ``time.perf_counter`` around the engine's own functions): the call's wall
   time split into the prefill (the engine's stats), the decode steps (``BatchDecoder.step``) and the
   rest (the batching loop, admitting requests, building completions). Each decode step is split into
   the model's forward (``DecodeStep`` or transformers' forward), the sampler
   (``sample_next_tokens``), the shared-prefix plan (``SegmentBatch.plan``), and the rest of the step
   (per-row Python: appending tokens, stop checks, the mask's growth, rows that finished).
2. **Profiled** (``torch.profiler`` on the CPU): the ops the decode steps run, by kind (``OP_KINDS``):
   self time and count over the call (prefill included) per decode step, and the ``--top`` ops by
   name (``TOP_OPS``): a kind sums ops of very different cost (a cast of a whole KV cache and a
   cast of one row are both ``_to_copy``). The profiler's own cost inflates these times; their
   shares and the op counts are what to read.

``--dtype`` (default ``both``): float32, and bfloat16 where this CPU multiplies it natively
(AVX512-BF16 / AMX), each in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results
from rollout_throughput import (
    SMOLLM2,
    TINY_SHAPE,
    cpu_header,
    grpo_requests,
    grpo_shape_engine,
    random_prompts,
    run_dtypes,
)

OP_KINDS: list[tuple[str, tuple[str, ...]]] = [
    ("matmul (linears, lm head)", ("addmm", "aten::mm", "linear", "mkldnn", "matmul")),
    (
        "attention (scores, softmax, weighted sum)",
        ("bmm", "baddbmm", "softmax", "scaled_dot_product", "einsum"),
    ),
    (
        "sampling (softmax, cumsum, search)",
        (
            "cumsum",
            "searchsorted",
            "multinomial",
            "exponential",
            "argmax",
            "sort",
            "topk",
            "log_softmax",
            "gather",
        ),
    ),
    (
        "copies, casts, cat",
        (
            "copy_",
            "aten::to",
            "_to_copy",
            "cat",
            "clone",
            "contiguous",
            "index_select",
            "index",
            "masked_fill",
            "fill_",
            "zeros",
            "empty",
            "full",
            "new_",
        ),
    ),
    (
        "norms and elementwise",
        (
            "mul",
            "add",
            "sub",
            "div",
            "rsqrt",
            "pow",
            "mean",
            "silu",
            "neg",
            "exp",
            "where",
            "flip",
            "max",
            "sum",
            "embedding",
        ),
    ),
]
"""Op kind -> substrings of the aten op names it covers (first match wins; anything else is "other")."""


TOP_OPS = 15
"""Ops listed by name in the profiled pass's third table (the most self time first)."""


def op_kind(name: str) -> str:
    for kind, needles in OP_KINDS:
        if any(needle in name for needle in needles):
            return kind
    return "other (views, dispatch-only ops)"


@dataclasses.dataclass
class Timers:
    """Seconds and calls accumulated per named part."""

    seconds: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1

        return timed


@contextmanager
def timed_parts(timers: Timers) -> Iterator[None]:
    """Time the decode loop's parts for the duration (patched in place, restored after)."""
    from aloft.inference import decode_step, decoding, shared_prefix

    patches = [
        (decoding.BatchDecoder, "step", "decode step"),
        (decode_step.DecodeStep, "__call__", "forward"),
        (decoding, "sample_next_tokens", "sampler"),
        (shared_prefix.SegmentBatch, "plan", "shared-prefix plan"),
    ]
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    try:
        for owner, attr, name in patches:
            setattr(owner, attr, timers.wrap(name, getattr(owner, attr)))
        yield
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)


def run(engine: Any, prompts: list[list[int]], args: argparse.Namespace) -> dict[str, float]:
    engine.prefix_cache.clear()
    before = dataclasses.replace(engine.stats)
    started = time.perf_counter()
    completions = asyncio.run(
        engine.generate(grpo_requests(prompts, args.samples, args.new_tokens, args.seed))
    )
    return {
        "seconds": time.perf_counter() - started,
        "tokens": sum(len(c.token_ids) for c in completions),
        "prefill_s": engine.stats.prefill_seconds - before.prefill_seconds,
    }


def profile_one(model_path: str, dtype_name: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from aloft.models.compute_thread import on_compute_thread

    dtype = getattr(torch, dtype_name)
    _, _, vocabulary, engine = grpo_shape_engine(model_path, dtype, args.prompts * args.samples, args.seed)
    prompts = random_prompts(vocabulary, args.prompts, args.prompt_tokens, seed=args.seed)
    try:
        run(engine, random_prompts(vocabulary, args.prompts, 16, seed=args.seed + 1), args)  # warm-up
        timers = Timers()
        with timed_parts(timers):
            timed = run(engine, prompts, args)
        ops: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        from torch.profiler import ProfilerActivity, profile

        # The engine runs the model on aloft's compute thread, and the profiler records the thread
        # it is started on: start and stop it there.
        profiler = profile(activities=[ProfilerActivity.CPU])
        on_compute_thread(profiler.__enter__)
        try:
            run(engine, prompts, args)
        finally:
            on_compute_thread(profiler.__exit__, None, None, None)
        by_name: dict[str, list[float]] = {}
        for event in profiler.key_averages():
            if event.key.startswith("aten::") or event.key.startswith("mkldnn::"):
                ops[op_kind(event.key)][0] += event.self_cpu_time_total / 1e6
                ops[op_kind(event.key)][1] += event.count
                by_name[event.key] = [event.self_cpu_time_total / 1e6, event.count]
    finally:
        engine.close()
    steps = max(timers.calls["decode step"], 1)
    return {
        "dtype": dtype_name,
        "timed": timed,
        "steps": steps,
        "parts": dict(timers.seconds),
        "ops": {kind: {"s_per_step": s / steps, "ops_per_step": n / steps} for kind, (s, n) in ops.items()},
        "top_ops": [
            {"op": name, "kind": op_kind(name), "s_per_step": s / steps, "ops_per_step": n / steps}
            for name, (s, n) in sorted(by_name.items(), key=lambda item: -item[1][0])[:TOP_OPS]
        ],
        "decode_step_kind": "DecodeStep" if timers.calls["forward"] else "transformers forward",
    }


def tables(results: list[dict[str, Any]]) -> list[Table]:
    """Table 0: the call's and a step's time by part; table 1: the profiled ops by kind; table 2:
    the ``TOP_OPS`` ops with the most self time, by name."""
    parts = []
    for result in results:
        timed, part, steps = result["timed"], result["parts"], result["steps"]
        step = part["decode step"]
        inner = part.get("forward", 0.0) + part.get("sampler", 0.0) + part.get("shared-prefix plan", 0.0)
        forward_name = "forward" if result["decode_step_kind"] == "DecodeStep" else "forward (transformers')"
        decode_forward = part.get("forward", 0.0) if result["decode_step_kind"] == "DecodeStep" else None
        rows = [
            ("whole call", timed["seconds"], None),
            ("prefill", timed["prefill_s"], None),
            ("decode steps", step, step / steps),
            (f"  {forward_name}", decode_forward, None if decode_forward is None else decode_forward / steps),
            ("  sampler", part.get("sampler", 0.0), part.get("sampler", 0.0) / steps),
            (
                "  shared-prefix plan",
                part.get("shared-prefix plan", 0.0),
                part.get("shared-prefix plan", 0.0) / steps,
            ),
            ("  rest of the step (per-row Python, mask)", step - inner, (step - inner) / steps),
            (
                "outside the steps (batching loop, requests)",
                timed["seconds"] - timed["prefill_s"] - step,
                None,
            ),
        ]
        parts += [
            [
                result["model"],
                result["dtype"],
                name,
                seconds,
                None if per is None else per * 1e3,
                None if seconds is None else seconds / timed["seconds"],
            ]
            for name, seconds, per in rows
        ]
    by_part = Table(
        ["model", "dtype", "part", "s", "ms / step", "share of the call"],
        parts,
        ["{}", "{}", "{}", "{:.2f}", "{:.1f}", "{:.0%}"],
        title="Timed pass: where the call's time goes (no profiler)",
    )
    op_rows, top_rows = [], []
    for result in results:
        head = [result["model"], result["dtype"]]
        total = sum(v["s_per_step"] for v in result["ops"].values()) or 1.0
        for kind, value in sorted(result["ops"].items(), key=lambda kv: -kv[1]["s_per_step"]):
            s = value["s_per_step"]
            op_rows.append([*head, kind, s * 1e3, s / total, value["ops_per_step"]])
        for op in result["top_ops"]:
            s = op["s_per_step"]
            top_rows.append([*head, op["op"], op["kind"], s * 1e3, s / total, op["ops_per_step"]])
    by_op = Table(
        ["model", "dtype", "op kind", "self ms / step (profiled)", "share", "ops / step"],
        op_rows,
        ["{}", "{}", "{}", "{:.1f}", "{:.0%}", "{:.0f}"],
        title="Profiled pass: the call's ops (prefill included) over its decode steps, by kind",
    )
    top = Table(
        ["model", "dtype", "op", "kind", "self ms / step (profiled)", "share", "calls / step"],
        top_rows,
        ["{}", "{}", "{}", "{}", "{:.1f}", "{:.0%}", "{:.1f}"],
        title=f"Profiled pass: the {TOP_OPS} ops with the most self time, by name",
    )
    return [by_part, by_op, top]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="smollm2", help="comma-separated: tiny, smollm2")
    parser.add_argument(
        "--dtype",
        default="both",
        choices=["both", "float32", "bfloat16"],
        help="both: float32, and bfloat16 where the CPU has native bf16",
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the tables and the machine record here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from aloft.models import build_tiny_model, resolve_model_path

    print(cpu_header(), flush=True)
    dtypes = run_dtypes(args.dtype)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-decode-"))
    results = []
    try:
        for name in args.models.split(","):
            if name == "tiny":
                longest = args.prompt_tokens + args.new_tokens + 64
                path = build_tiny_model(scratch / "tiny", max_position_embeddings=longest, **TINY_SHAPE)
            else:
                path = resolve_model_path(SMOLLM2)
            for dtype in dtypes:
                print(
                    f"{name} {dtype}: {args.prompts} x {args.samples} rows, {args.prompt_tokens}+{args.new_tokens} tokens ...",
                    flush=True,
                )
                results.append({"model": name, **profile_one(str(path), dtype, args)})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    shown = tables(results)
    print("\n\n".join(str(table) for table in shown))
    if args.json is not None:
        write_results(args.json, "decode_profile", command_line(__file__, argv), {"results": results}, shown)


if __name__ == "__main__":
    main()
