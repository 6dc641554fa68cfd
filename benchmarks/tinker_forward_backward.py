"""Seconds of one tinker-serve ``forward_backward`` on an RL batch shaped like tinker-cookbook's
``rl_loop``: datums padded and run whole vs datums sharing their group's prompt (``aloft.tinker.batching``).

The batch: ``--groups`` prompts x ``--samples`` replies. Each prompt is the loop's few-shot conversation
and a question from the gsm8k stand-in, in ChatML. Each reply is ``--reply-tokens`` random token ids.
The datums are laid out as the loop writes them: target 0 and advantage 0 on the prompt positions,
the sampler's logprobs, and one advantage a sample. The loss is ``importance_sampling``. Both layouts
run in the same ``TrainingHost`` (a LoRA of rank 32) under the same 2,048-token micro-batch budget;
"padded" sets ``MIN_SHARED_PREFIX`` beyond any prompt, so nothing is shared. Each layout is timed
``--repeats`` times and the median is kept; the gradients are zeroed between calls. The check column
is the largest gap between the two layouts' per-token logprobs.

    python benchmarks/tinker_forward_backward.py                   # SmolLM2-135M, 8 x 8 (~8 min on 2 cores)
    python benchmarks/tinker_forward_backward.py --model tiny --groups 2 --samples 3   # seconds
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aloft.tinker import batching
from aloft.tinker.cookbook import RL_LOOP_FEW_SHOT, RL_LOOP_SUFFIX, gsm8k_rows
from aloft.tinker.training import LoraSpec, TrainingHost
from aloft.tinker.wire import Datum

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

CLIENT = "bench:train:0"


def rl_batch(
    tokenizer, groups: int, samples: int, reply_tokens: int, vocab: int, seed: int = 0
) -> list[Datum]:
    """``groups x samples`` datums as rl_loop builds them (input = prompt + reply[:-1])."""
    rng = np.random.default_rng(seed)
    data = []
    for row in gsm8k_rows("train")[:groups]:
        turns = [*RL_LOOP_FEW_SHOT, {"role": "user", "content": row["question"] + RL_LOOP_SUFFIX}]
        # ChatML as the cookbook's qwen3_instruct renderer writes it (no system line).
        text = (
            "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns)
            + "<|im_start|>assistant\n"
        )
        prompt = tokenizer.encode(text, add_special_tokens=False)
        for _ in range(samples):
            reply = rng.integers(3, vocab, size=reply_tokens).tolist()
            n = len(prompt) + reply_tokens - 1
            advantage = float(rng.normal())
            data.append(
                Datum(
                    tokens=(prompt + reply)[:-1],
                    inputs={
                        "target_tokens": np.array([0] * (len(prompt) - 1) + reply),
                        "logprobs": np.full(n, -2.0, dtype=np.float32),
                        "advantages": np.array(
                            [0.0] * (len(prompt) - 1) + [advantage] * reply_tokens, dtype=np.float32
                        ),
                    },
                )
            )
    return data


def timed(host: TrainingHost, data: list[Datum], repeats: int) -> tuple[float, list[np.ndarray]]:
    times, outputs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs, _ = host.forward_backward(CLIENT, data, "importance_sampling", {}, forward_only=False)
        times.append(time.perf_counter() - start)
        host.client(CLIENT).optimizer.zero_grad(set_to_none=True)
    return statistics.median(times), [o["logprobs"] for o in outputs]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="built-in name, HF directory or 'tiny'"
    )
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--reply-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    model = args.model
    if model == "tiny":
        from aloft.models import build_tiny_model

        model = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", hidden_size=64, num_layers=2, seed=0)
    host = TrainingHost(model, max_length=8192)
    host.create(CLIENT, LoraSpec(rank=32, seed=0))
    vocab = host.tokenizer.vocab_size
    data = rl_batch(host.tokenizer, args.groups, args.samples, args.reply_tokens, vocab)

    shared_s, shared_logprobs = timed(host, data, args.repeats)
    sharing = batching.MIN_SHARED_PREFIX
    batching.MIN_SHARED_PREFIX = 10**9  # nothing is long enough to share: every datum runs whole
    try:
        padded_s, padded_logprobs = timed(host, data, args.repeats)
    finally:
        batching.MIN_SHARED_PREFIX = sharing
    gap = max(float(np.abs(a - b).max()) for a, b in zip(shared_logprobs, padded_logprobs, strict=True))
    prompt_tokens = len(data[0].tokens) - args.reply_tokens + 1
    figures = {
        "benchmark": "tinker_forward_backward",
        "model": args.model,
        "datums": len(data),
        "prompt_tokens": prompt_tokens,
        "reply_tokens": args.reply_tokens,
        "padded_s": padded_s,
        "shared_s": shared_s,
        "speedup": padded_s / shared_s,
        "logprob_max_gap": gap,
    }
    table = Table(
        ["layout", "seconds", "speed-up", "logprob gap"],
        [["padded, run whole", padded_s, 1.0, None], ["shared prompts", shared_s, padded_s / shared_s, gap]],
        ["{}", "{:.2f}", "{:.2f}x", "{:.1e}"],
        title=f"forward_backward of {len(data)} datums ({args.groups} prompts of {prompt_tokens} tokens x "
        f"{args.samples} replies of {args.reply_tokens}), {args.model}",
    )
    print()
    print(table)
    if args.json:
        write_results(args.json, "tinker_forward_backward", command_line(__file__, argv), figures, [table])
    return figures


if __name__ == "__main__":
    main()
