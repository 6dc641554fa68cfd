"""Training tokens per second, padded vs packed micro-batches, on length-varied GRPO batches.

Run from the repo root::

    python benchmarks/packing.py                                   # tiny model and SmolLM2-135M
    python benchmarks/packing.py --models tiny --prompts 4 --repeats 1   # seconds
    python benchmarks/packing.py --json out.json

The work. One GRPO batch: ``--prompts`` chat-templated arithmetic questions, each sampled ``--samples``
times, with completions of random tokens whose lengths are drawn uniformly from
``[--min-tokens, --max-tokens]`` (8 to 256 by default, seeded). Rows are in sampling order (a group's
samples together), as the trainer collates them.

What is timed: ``PolicyWorker.update`` on the whole batch as one mini-batch (forward, backward and the
AdamW step), the policy's training path in ``aloft train``. After one warm-up each, the two layouts
take turns for ``--repeats`` rounds (see ``time_interleaved``); the table gives the median seconds
and the median of the per-round ratios.
Same model, same batch, same loss (PPO clip, token mean) on both sides; the only difference is how
micro-batches are formed:

- ``padded``: ``--micro-batch-size`` rows per micro-batch, each padded to its widest prompt plus its
  longest completion (padding columns nobody in the micro-batch needs are trimmed), with the default
  ``optim.share_prompts`` (a group's prompt forwarded once).
- ``packed``: ``optim.packing=true``: each micro-batch's sequences end to end in one row, no padding,
  a group's prompt laid out once (the same ``optim.share_prompts``), micro-batches cut at
  ``--micro-batch-tokens`` real tokens.

tok/s = real tokens (prompts + completions, no padding) / seconds; ``positions`` counts the token
positions each side runs through the model. Precision: ``--precision auto`` is bf16 autocast where
this CPU multiplies bf16 natively (the trainer's default), else fp32.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

MODELS = ("tiny", "smollm2")
SMOLLM2 = "smollm2-135m-instruct"
TINY_SHAPE = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2}


def make_batch(tokenizer: Any, args: argparse.Namespace) -> Any:
    """A collated GRPO batch: ``prompts x samples`` rows with random completions of varied length."""
    from aloft.training.batch import collate
    from aloft.types import RolloutStatus, Trajectory

    rng = random.Random(args.seed)
    trajectories = []
    for p in range(args.prompts):
        question = f"What is {rng.randint(1, 10**6)} + {rng.randint(1, 999)}?" + " Show your work." * (p % 3)
        chat = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        for _ in range(args.samples):
            n = rng.randint(args.min_tokens, args.max_tokens)
            completion = [rng.randrange(100, len(tokenizer) - 1) for _ in range(n)]
            trajectories.append(
                Trajectory(
                    prompt_ids=prompt,
                    completion_ids=completion,
                    loss_mask=[1] * n,
                    sampler_logprobs=[-1.0] * n,
                    rewards=[0.0] * (n - 1) + [float(rng.random() < 0.5)],
                    status=RolloutStatus.STOP,
                    group_id=str(p),
                )
            )
    return collate(trajectories, tokenizer.pad_token_id or 0, {str(p): p for p in range(args.prompts)})


def make_update(model_path: str, batch: Any, settings: Any) -> Callable[[], float]:
    """A function running one ``PolicyWorker.update`` on ``batch`` (one mini-batch), returning seconds."""
    import torch

    from aloft.config.schema import AlgorithmConfig
    from aloft.training.workers import PolicyWorker

    worker = PolicyWorker(model_path, settings, temperature=1.0)
    algo = AlgorithmConfig()
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(0))
    rows = list(range(batch.num_rows))

    def update() -> float:
        started = time.perf_counter()
        worker.update(
            batch,
            advantages,
            algo,
            old_logprobs=None,
            ref_logprobs=None,
            mini_batches=[rows],
            max_len=batch.completion_width,
        )
        return time.perf_counter() - started

    return update


def time_interleaved(updates: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each update over ``rounds`` rounds, after one warm-up each.

    The layouts take turns within every round, in alternating order (ABBA...): this machine's speed
    drifts by tens of percent over a minute, and a layout timed only while it is slow would carry
    the drift into the ratio. Ratios are then taken within a round.
    """
    for update in updates.values():
        update()
    seconds: dict[str, list[float]] = {label: [] for label in updates}
    order = list(updates)
    for round_ in range(rounds):
        for label in order if round_ % 2 == 0 else reversed(order):
            seconds[label].append(updates[label]())
    return seconds


def positions(batch: Any, micro_batching: Any, packed: bool) -> int:
    """Token positions run through the model: padded micro-batch areas, or the packed rows' lengths.

    (Padded counts every row's prompt columns, though ``share_prompts`` runs a group's prompt once.)
    """
    from aloft.training.packing import pack_rows

    total = 0
    for rows in micro_batching.split(batch):
        micro = batch.select(rows)
        total += (
            pack_rows(micro, share_prompts=True).input_ids.shape[1] if packed else micro.input_ids.numel()
        )
    return total


def layout_updates(
    model_path: str, batch: Any, args: argparse.Namespace, bf16: bool
) -> tuple[dict[str, Callable[[], float]], dict[str, Any]]:
    """``make_update`` for the padded and the packed layout (``--micro-batch-size`` rows, or
    ``--micro-batch-tokens`` tokens a micro-batch), with each layout's ``MicroBatching``."""
    from aloft.models.compute_thread import on_compute_thread
    from aloft.training.workers import OptimSettings

    updates, micro_batchings = {}, {}
    for label, packing in (("padded", False), ("packed", True)):
        settings = OptimSettings(
            lr=1e-6,
            micro_batch_size=args.micro_batch_size,
            micro_batch_tokens=args.micro_batch_tokens,
            packing=packing,
            bf16_autocast=bf16,
        )
        # All model work, loading included, on aloft's compute thread (one OpenMP team, see
        # aloft.models.compute_thread).
        updates[label] = on_compute_thread(make_update, model_path, batch, settings)
        micro_batchings[label] = settings.micro_batching
    return updates, micro_batchings


def bench_model(name: str, model_path: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from aloft.models import load_tokenizer
    from aloft.models.compute_thread import on_compute_thread
    from aloft.models.precision import fast_dtype

    bf16 = fast_dtype("cpu") == torch.bfloat16 if args.precision == "auto" else args.precision == "bf16"
    batch = make_batch(load_tokenizer(model_path), args)
    real_tokens = int(batch.attention_mask.sum())
    updates, micro_batchings = layout_updates(model_path, batch, args, bf16)
    seconds = on_compute_thread(time_interleaved, updates, args.repeats)
    rows = []
    for label in updates:
        micro_batching = micro_batchings[label]
        median = statistics.median(seconds[label])
        ratios = [pad / mine for pad, mine in zip(seconds["padded"], seconds[label])]
        rows.append(
            {
                "layout": label,
                "micro_batches": len(micro_batching.split(batch)),
                "positions": positions(batch, micro_batching, label == "packed"),
                "seconds": median,
                "seconds_per_round": seconds[label],
                "tok_per_s": real_tokens / median,
                "ratio_vs_padded": statistics.median(ratios),
                "ratio_per_round": ratios,
            }
        )
    return {
        "model": name,
        "precision": "bf16" if bf16 else "fp32",
        "rows_in_batch": batch.num_rows,
        "real_tokens": real_tokens,
        "layouts": rows,
    }


def results_table(results: list[dict[str, Any]]) -> Table:
    """One row per model and layout."""
    return Table(
        [
            "model",
            "precision",
            "layout",
            "micro-batches",
            "positions",
            "real tokens",
            "seconds",
            "tok/s",
            "vs padded",
            "per round",
        ],
        [
            [
                result["model"],
                result["precision"],
                row["layout"],
                row["micro_batches"],
                row["positions"],
                result["real_tokens"],
                row["seconds"],
                row["tok_per_s"],
                row["ratio_vs_padded"],
                row["ratio_per_round"],
            ]
            for result in results
            for row in result["layouts"]
        ],
        ["{}", "{}", "{}", "{}", "{}", "{}", "{:.2f}", "{:.0f}", "{:.2f}x", "{:.2f}"],
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny,smollm2", help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--prompts", type=int, default=8, help="prompts in the batch")
    parser.add_argument("--samples", type=int, default=4, help="samples per prompt")
    parser.add_argument("--min-tokens", type=int, default=8, help="shortest completion")
    parser.add_argument("--max-tokens", type=int, default=256, help="longest completion")
    parser.add_argument("--micro-batch-size", type=int, default=8, help="rows per padded micro-batch")
    parser.add_argument("--micro-batch-tokens", type=int, default=4096, help="tokens per packed micro-batch")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    parser.add_argument("--repeats", type=int, default=4, help="rounds of timed updates (medians count)")
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
    import torch

    from aloft.models import build_tiny_model, resolve_model_path

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-packing-"))
    results = []
    try:
        for name in args.models.split(","):
            path = (
                build_tiny_model(scratch / "tiny", **TINY_SHAPE)
                if name == "tiny"
                else resolve_model_path(SMOLLM2)
            )
            started = time.perf_counter()
            print(
                f"{name}: {args.prompts} x {args.samples} rows, completions {args.min_tokens}..{args.max_tokens} ...",
                end=" ",
                flush=True,
            )
            results.append(bench_model(name, str(path), args))
            print(f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = results_table(results)
    print()
    print(table)
    print()
    print(
        "tok/s = real (unpadded) prompt + completion tokens / seconds of one PolicyWorker.update "
        "(forward, backward, AdamW), median of the rounds; target (issue 5): packed >= 1.5x padded."
    )
    if args.json:
        figures = {"benchmark": "packing", "results": results}
        write_results(args.json, "packing", command_line(__file__, argv), figures, [table])
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
