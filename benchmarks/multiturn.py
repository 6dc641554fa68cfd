"""Multi-turn text-to-SQL rollouts: prompt tokens prefilled per trajectory with and without KV reuse.

Run from the repo root::

    python benchmarks/multiturn.py                                   # SmolLM2-135M, 8 trajectories, 5 turns
    python benchmarks/multiturn.py --model qwen2.5-coder-0.5b-instruct --trajectories 4
    python benchmarks/multiturn.py --model tiny --trajectories 2 --turns 3 --turn-tokens 8   # seconds

Every turn of a SkyRL-SQL episode re-sends the whole history: the ~1,000-token prompt (system
message, schema, question), the earlier replies and the observations. This benchmark runs real
episodes through the real pieces: held-out rows of ``aloft data build sql`` (real schemas), aloft's
``Generator`` (token in, token out: each turn's prompt is the previous one plus the new reply and
observation tokens, never re-tokenized) and the hf engine generating with the real model. The env is
``text2sql`` on the real SQLite database with one change for the measurement, ``ProbingText2Sql``:
whatever the model wrote, turns 1 to ``turns - 1`` run a real probe (``SELECT * FROM <table> LIMIT 5``,
one table after another) and return its real observation, and the last turn ends the episode, so
every trajectory has exactly ``--turns`` turns whatever a small model replies. Each turn generates
``--turn-tokens`` tokens (EOS ignored).

Two rows, the same episodes (same seed): the hf engine with ``prefix_cache_gb=0`` (each turn prefills
the whole history again) and with the prefix cache (each turn prefills only the tokens after the
longest cached prefix: the new observation). Printed: prompt tokens prefilled per trajectory, seconds,
and the ratios. The first turn's prompts are distinct, so nothing is shared there in either row.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aloft.data import build_dataset, validate_row
from aloft.gym import core as gym_core
from aloft.gym.core import StepOutput
from aloft.gym.envs.text2sql import Text2SqlEnv
from aloft.inference.hf import HFEngine
from aloft.models import build_tiny_model, load_model, load_tokenizer, resolve_model_path
from aloft.models.precision import fast_dtype
from aloft.rollout import EpisodeLimits, Generator
from aloft.types import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info
from result_tables import Table, command_line, write_results

ENV_ID = "probing_text2sql"


class ProbingText2Sql(Text2SqlEnv):
    """``text2sql`` that probes a real table on every turn but the last, whatever the reply says."""

    def step(self, action: str) -> StepOutput:
        if self._turns + 1 >= self.max_turns:
            self._turns += 1
            return self._finish(0.0, {"turn": self._turns})
        tables = self.tools.executor.tables()
        table = tables[self._turns % len(tables)]
        return super().step(f"<think>Look at {table}.</think><sql>SELECT * FROM {table} LIMIT 5</sql>")


def run(
    model: Any, tokenizer: Any, rows: list[Any], args: argparse.Namespace, cache_gb: float
) -> dict[str, Any]:
    # min_shared_prefix=0 in both rows: trajectories admitted together share the system message
    # (and a schema), which would otherwise be prefilled once without the cache too; this benchmark
    # measures the cache across turns (benchmarks/shared_prefill.py measures that sharing).
    engine = HFEngine(
        model, tokenizer, dtype=model.dtype, seed=args.seed, prefix_cache_gb=cache_gb, min_shared_prefix=0
    )
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())  # every turn: its full budget
    limits = EpisodeLimits(max_turns=args.turns, max_total_tokens=args.turns * (args.turn_tokens + 400))
    generator = Generator(
        engine, tokenizer, limits=limits, default_env_config={"max_turns": args.turns}, lockstep=args.lockstep
    )
    sampling = SamplingParams(max_tokens=args.turn_tokens, temperature=0.7)
    try:
        started = time.perf_counter()
        groups = asyncio.run(generator.generate(rows, n=1, sampling=sampling, seed=args.seed))
        seconds = time.perf_counter() - started
    finally:
        engine.close()
    trajectories = [group.trajectories[0] for group in groups]
    sampled = json.dumps([t.completion_ids for t in trajectories]).encode()
    return {
        "prefix_cache_gb": cache_gb,
        "trajectories": len(trajectories),
        "turns": [t.info["turns"] for t in trajectories],
        "prompt_tokens": [len(t.prompt_ids) for t in trajectories],
        "final_history_tokens": [len(t.prompt_ids) + len(t.completion_ids) for t in trajectories],
        "prefilled_tokens": engine.stats.prefilled_tokens,
        "prefilled_per_trajectory": engine.stats.prefilled_tokens / len(trajectories),
        "completion_sha256": hashlib.sha256(sampled).hexdigest(),  # equal digests: the same tokens
        "seconds": seconds,
    }


def load_sql_model(name: str, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in ``dtype`` (default: the CPU's fast dtype): a built-in name or
    directory, or ``tiny`` (a 2-layer model with byte-level tokens and room for the SQL prompts, built
    in a temp dir)."""
    if name == "tiny":
        path = build_tiny_model(
            Path(tempfile.mkdtemp()) / "tiny",
            hidden_size=64,
            num_layers=2,
            seed=0,
            max_position_embeddings=16384,
        )
    else:
        path = resolve_model_path(name)
    return load_model(path, dtype=dtype or fast_dtype()), load_tokenizer(path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="built-in name, directory, or 'tiny'"
    )
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--turn-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lockstep",
        action="store_true",
        help="the same engine batches on every run (trainer.deterministic): reruns, and versions, "
        "sample the same tokens; without it, env timing decides batches, and bf16 logits with them",
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    model, tokenizer = load_sql_model(args.model)
    raw = build_dataset("sql", n=args.trajectories, seed=args.seed, split="heldout", max_turns=args.turns)
    rows = [validate_row({**row, "env_class": ENV_ID}, i, "sql") for i, row in enumerate(raw)]
    gym_core.register(ENV_ID, ProbingText2Sql, override=True)
    try:
        results = [run(model, tokenizer, rows, args, cache_gb) for cache_gb in (0.0, 2.0)]
    finally:
        gym_core._REGISTRY.pop(ENV_ID, None)
    reprefilled, cached = results
    figures = {
        "benchmark": "multiturn",
        "model": args.model,
        "dtype": str(model.dtype).removeprefix("torch."),
        **machine_info(),  # also at the top level, where readers of the older JSON look
        "same_tokens": reprefilled["completion_sha256"] == cached["completion_sha256"],
        "rows": results,
        "prefill_ratio": reprefilled["prefilled_tokens"] / max(cached["prefilled_tokens"], 1),
        "time_ratio": reprefilled["seconds"] / max(cached["seconds"], 1e-9),
    }
    tables = [
        Table(
            ["hf engine", "prefilled/trajectory", "seconds"],
            [
                [label, row["prefilled_per_trajectory"], row["seconds"]]
                for label, row in (("history re-prefilled", reprefilled), ("prefix cache", cached))
            ],
            ["{}", "{:.0f}", "{:.1f}"],
            title=f"multi-turn text2sql: {args.model} ({figures['dtype']}), {args.trajectories} trajectories x "
            f"{args.turns} turns x {args.turn_tokens} tokens, prompts {min(cached['prompt_tokens'])}-"
            f"{max(cached['prompt_tokens'])} tokens, histories up to {max(cached['final_history_tokens'])}",
        ),
        Table(
            ["prefilled/trajectory", "seconds"],
            [[figures["prefill_ratio"], figures["time_ratio"]]],
            ["{:.2f}x", "{:.2f}x"],
            title="ratio (re-prefilled / cache)",
        ),
    ]
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "multiturn", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
