"""A packed training update on text-to-SQL prompts: identical prompts shared, against beginnings shared too.

Run from the repo root::

    python benchmarks/shared_update.py                                   # SmolLM2-135M
    python benchmarks/shared_update.py --model tiny --questions 4 --repeats 1   # seconds

The work. One GRPO batch of ``--questions`` questions of ``aloft data build sql`` (training split,
seeded: real schemas on the builder's databases) x ``--samples`` samples, each question's first-turn
prompt made with the rollout generator's own chat template code, with completions of random tokens
of ``[--min-tokens, --max-tokens]``. Every prompt begins with one system message, then its
database's schema: the questions differ in their last few dozen tokens.

What is timed: ``PolicyWorker.update`` on the whole batch (packed micro-batches of
``--micro-batch-tokens``, the SkyRL-SQL experiment's 16,384), with one setting changed:

- ``identical prompts``: ``optim.min_shared_prefix=0``: a group's prompt is laid out once and its
  other samples attend to it (what packed updates did before), every question's prompt whole;
- ``shared beginnings``: the default ``optim.min_shared_prefix=64``: a prompt that begins like an
  earlier one in its micro-batch (the system message; the schema, for a question on the same
  database) is laid out from where they differ (``aloft.training.packing.pack_rows``).

After one warm-up each the two take turns for ``--repeats`` rounds (``packing.time_interleaved``).
Also printed: the token positions each runs through the model, and the largest difference between
the two layouts' logprobs of the batch (the same model, before any update: float rounding only).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from packing import SMOLLM2, TINY_SHAPE, make_update, time_interleaved
from result_tables import Table, command_line, write_results

LAYOUTS = (("identical prompts", 0), ("shared beginnings", 64))


def sql_batch(tokenizer: Any, args: argparse.Namespace) -> Any:
    """``questions x samples`` rows: SQL first-turn prompts, random completions of varied length."""
    from aloft.data import build_dataset, validate_row
    from aloft.rollout.generator import ChatFormatter
    from aloft.training.batch import collate
    from aloft.types import RolloutStatus, Trajectory

    raw = build_dataset("sql", n=0, seed=0, split="train", max_turns=1)
    rng = random.Random(args.seed)
    rows = [validate_row(row, i, "sql") for i, row in enumerate(rng.sample(raw, args.questions))]
    chat = ChatFormatter(tokenizer)
    trajectories = []
    for question, row in enumerate(rows):
        prompt = chat.prompt_ids(row.prompt)
        for _ in range(args.samples):
            n = rng.randint(args.min_tokens, args.max_tokens)
            trajectories.append(
                Trajectory(
                    prompt_ids=prompt,
                    completion_ids=[rng.randrange(100, len(tokenizer) - 1) for _ in range(n)],
                    loss_mask=[1] * n,
                    sampler_logprobs=[-1.0] * n,
                    rewards=[0.0] * (n - 1) + [float(rng.random() < 0.5)],
                    status=RolloutStatus.STOP,
                    group_id=str(question),
                )
            )
    databases = sorted({str(row.extras.get("db_id")) for row in rows})
    return collate(
        trajectories, tokenizer.pad_token_id or 0, {str(q): q for q in range(len(rows))}
    ), databases


def positions(batch: Any, micro_batching: Any) -> int:
    """Token positions the packed rows run through the model."""
    from aloft.training.packing import pack_rows

    return sum(
        pack_rows(batch.select(rows), True, micro_batching.min_shared_prefix).input_ids.shape[1]
        for rows in micro_batching.split(batch)
    )


def logprobs(model_path: str, batch: Any, settings: Any) -> Any:
    """The batch's logprobs ``[B, T]`` under ``settings``' layout (a fresh policy, no update)."""
    from aloft.training.workers import PolicyWorker

    return PolicyWorker(model_path, settings, temperature=1.0).compute_logprobs(batch)


def bench(model_path: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from aloft.models import load_tokenizer
    from aloft.models.compute_thread import on_compute_thread
    from aloft.models.precision import fast_dtype
    from aloft.training.workers import OptimSettings

    bf16 = fast_dtype("cpu") == torch.bfloat16 if args.precision == "auto" else args.precision == "bf16"
    batch, databases = sql_batch(load_tokenizer(model_path), args)
    settings = {
        label: OptimSettings(
            lr=1e-6,
            packing=True,
            micro_batch_tokens=args.micro_batch_tokens,
            min_shared_prefix=least,
            bf16_autocast=bf16,
        )
        for label, least in LAYOUTS
    }
    # All model work, loading included, on aloft's compute thread (see aloft.models.compute_thread).
    gap = on_compute_thread(
        lambda: float(
            (
                (
                    logprobs(model_path, batch, settings[LAYOUTS[0][0]])
                    - logprobs(model_path, batch, settings[LAYOUTS[1][0]])
                )
                * batch.loss_mask
            )
            .abs()
            .max()
        )
    )
    updates = {label: on_compute_thread(make_update, model_path, batch, s) for label, s in settings.items()}
    seconds = on_compute_thread(time_interleaved, updates, args.repeats)
    first = LAYOUTS[0][0]
    rows = []
    for label, least in LAYOUTS:
        median = statistics.median(seconds[label])
        ratios = [base / mine for base, mine in zip(seconds[first], seconds[label])]
        rows.append(
            {
                "layout": label,
                "min_shared_prefix": least,
                "micro_batches": len(settings[label].micro_batching.split(batch)),
                "positions": positions(batch, settings[label].micro_batching),
                "seconds": median,
                "seconds_per_round": seconds[label],
                "speedup": statistics.median(ratios),
                "speedup_per_round": ratios,
            }
        )
    prompts = batch.attention_mask[:, : batch.prompt_width].sum(dim=1)
    return {
        "precision": "bf16" if bf16 else "fp32",
        "questions": args.questions,
        "samples": args.samples,
        "databases": databases,
        "prompt_tokens_per_question": float(prompts.float().mean()),
        "real_tokens": int(batch.attention_mask.sum()),
        "largest_logprob_gap": gap,
        "layouts": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"))
    parser.add_argument("--questions", type=int, default=8, help="questions in the batch")
    parser.add_argument("--samples", type=int, default=4, help="samples per question")
    parser.add_argument("--min-tokens", type=int, default=32, help="shortest completion")
    parser.add_argument("--max-tokens", type=int, default=256, help="longest completion")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384, help="tokens per packed micro-batch")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    parser.add_argument("--repeats", type=int, default=2, help="rounds of timed updates (medians count)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    if not 1 <= args.min_tokens <= args.max_tokens:
        parser.error("need 1 <= --min-tokens <= --max-tokens")

    from aloft.models import build_tiny_model, resolve_model_path

    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-shared-update-"))
    try:
        # The tiny model needs positions for the SQL prompts' ~700 tokens.
        path = (
            build_tiny_model(scratch / "tiny", **TINY_SHAPE, max_position_embeddings=4096)
            if args.model == "tiny"
            else resolve_model_path(SMOLLM2)
        )
        started = time.perf_counter()
        figures = {"benchmark": "shared_update", "model": args.model, **bench(str(path), args)}
        print(f"{args.model}: {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = Table(
        ["layout", "micro-batches", "positions", "seconds", "speedup", "per round"],
        [
            [
                row["layout"],
                row["micro_batches"],
                row["positions"],
                row["seconds"],
                row["speedup"],
                row["speedup_per_round"],
            ]
            for row in figures["layouts"]
        ],
        ["{}", "{}", "{:,}", "{:.2f}", "{:.2f}x", "{:.2f}"],
        title=(
            f"packed update, {args.model} ({figures['precision']}): {args.questions} SQL questions x {args.samples} "
            f"samples on {len(figures['databases'])} databases, {figures['prompt_tokens_per_question']:.0f} prompt "
            f"tokens a question, {figures['real_tokens']:,} real tokens; largest logprob gap "
            f"{figures['largest_logprob_gap']:.1e}"
        ),
    )
    print(table)
    if args.json:
        write_results(args.json, "shared_update", command_line(__file__, argv), figures, [table])
        print(f"figures written to {args.json}")
    return figures


if __name__ == "__main__":
    main()
