"""Resident memory of an hf engine across rounds of multi-turn episodes: sessions ended vs kept.

Run from the repo root::

    python benchmarks/session_memory.py                       # 5 rounds x 256 three-turn trajectories
    python benchmarks/session_memory.py --rounds 2 --trajectories 32     # seconds

The hf engine keeps each finished turn's KV (``engine.prefix_cache_gb``, 2 GiB by default) so the
trajectory's next turn prefills only its new tokens. An episode's last turn leaves that KV too; the
generator ends the episode's session and the engine frees it at once. This benchmark runs the same
rounds of episodes (real ``Generator``, the ``arithmetic`` env at 3 turns, which a random tiny model
always uses up, the hf engine with its prefix cache on, no weight update between rounds) twice, each
in a fresh process so the two do not share an allocator: once as aloft runs, once with the engine's
``end_sessions`` turned into a no-op (what happened before sessions were ended: the KV stayed until
least-recently-used eviction), once with no prefix cache at all (``engine.prefix_cache_gb=0``: the
growth that has nothing to do with it), and the first two again with oneDNN's kernel cache off
(``CONFIGS``). Printed
per round: the process's RSS and the bytes the prefix cache holds; then the creep, the last round's
RSS minus the first's (``1->N``) and minus the second's (``2->N``: past the first round's warm-up of
allocator arenas and kernels, what keeps growing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aloft.data import build_dataset, validate_row
from aloft.inference.hf import HFEngine
from aloft.models import build_tiny_model, load_tokenizer
from aloft.rollout import EpisodeLimits, Generator
from aloft.types import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info
from result_tables import Table, command_line, write_results

MiB = 2**20


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The rounds in this process: RSS and prefix-cache bytes after each."""
    path = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", hidden_size=64, num_layers=2, seed=0)
    tokenizer = load_tokenizer(path)
    cache_gb = 0.0 if args.mode == "off" else 2.0
    engine = HFEngine(path, tokenizer, dtype="float32", prefix_cache_gb=cache_gb)
    if args.mode == "kept":

        async def keep(session_ids: list[str]) -> None:  # the old behaviour: nothing ended
            return None

        engine.end_sessions = keep  # type: ignore[method-assign]
    groups_per_round = args.trajectories // args.samples
    generator = Generator(
        engine,
        tokenizer,
        limits=EpisodeLimits(max_turns=3, max_total_tokens=3 * (args.turn_tokens + 64)),
        env_configs={"arithmetic": {"max_turns": 3}},
    )
    sampling = SamplingParams(max_tokens=args.turn_tokens, temperature=1.0)
    rounds = []
    try:
        for index in range(args.rounds):
            raw = build_dataset("arithmetic", n=groups_per_round, seed=index)
            rows = [validate_row(row, i, "arithmetic") for i, row in enumerate(raw)]
            groups = asyncio.run(
                generator.generate(
                    rows, n=args.samples, sampling=sampling, seed=index, group_prefix=f"r{index}g"
                )
            )
            turns = [t.info["turns"] for g in groups for t in g.trajectories]
            rounds.append(
                {
                    "rss_mib": rss_bytes() / MiB,
                    "prefix_cache_mib": engine.prefix_cache.nbytes / MiB,
                    "trajectories": len(turns),
                    "turns": sum(turns),
                    "cache_hits": engine.prefix_cache.hits,
                }
            )
    finally:
        engine.close()
    rss = [r["rss_mib"] for r in rounds]
    return {
        "mode": args.mode,
        "rounds": rounds,
        "creep_mib": rss[-1] - rss[0],
        "creep_after_round_2_mib": rss[-1] - rss[min(1, len(rss) - 1)],
    }


CONFIGS = {
    "kept": ("kept", None),
    "ended": ("ended", None),
    "prefix cache off": ("off", None),
    "kept, oneDNN cache off": ("kept", "0"),
    "ended, oneDNN cache off": ("ended", "0"),
}
"""Each in a fresh process: (mode, ONEDNN_PRIMITIVE_CACHE_CAPACITY). oneDNN keeps a JIT-compiled
kernel per matmul shape it has seen (up to 1,024 by default), and a decode batch's shape changes
with every row that joins or leaves: part of the RSS growth of early rounds is that bounded cache,
not anything aloft holds. Turning it off shows the engine's own memory alone."""


def memory_tables(results: dict[str, Any], rounds: int) -> list[Table]:
    """RSS after each round per configuration, with the creep (``1->N``, ``2->N``) below; then the
    prefix cache's bytes after each round."""
    labels = list(CONFIGS)
    rss = [
        [index + 1, *(results[label]["rounds"][index]["rss_mib"] for label in labels)]
        for index in range(rounds)
    ]
    rss.append(["1->N", *(results[label]["creep_mib"] for label in labels)])
    rss.append(["2->N", *(results[label]["creep_after_round_2_mib"] for label in labels)])
    cache = [
        [index + 1, *(results[label]["rounds"][index]["prefix_cache_mib"] for label in labels)]
        for index in range(rounds)
    ]
    return [
        Table(["round", *labels], rss, ["{}"] + ["{:.0f}"] * len(labels), title="RSS MiB after each round"),
        Table(
            ["round", *labels],
            cache,
            ["{}"] + ["{:.1f}"] * len(labels),
            title="prefix cache MiB after each round",
        ),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trajectories", type=int, default=256, help="per round")
    parser.add_argument("--samples", type=int, default=4, help="per prompt (a group shares its prompt's KV)")
    parser.add_argument("--turn-tokens", type=int, default=32)
    parser.add_argument("--mode", choices=["ended", "kept", "off"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.mode is not None:  # a child: one mode, its figures on stdout's last line
        print(json.dumps(measure(args)))
        return {}

    results = {}
    for label, (mode, onednn_cache) in CONFIGS.items():
        settings = ["--rounds", args.rounds, "--trajectories", args.trajectories, "--samples", args.samples]
        child = [sys.executable, __file__, *map(str, settings), "--turn-tokens", str(args.turn_tokens)]
        env = dict(os.environ)
        if onednn_cache is not None:
            env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = onednn_cache
        done = subprocess.run([*child, "--mode", mode], capture_output=True, text=True, check=True, env=env)
        results[label] = json.loads(done.stdout.strip().splitlines()[-1])
    figures = {
        "benchmark": "session_memory",
        **machine_info(),  # also at the top level, where readers of the older JSON look
        "settings": {k: v for k, v in vars(args).items() if k not in ("mode", "json")},
        "runs": results,
    }
    tables = memory_tables(results, args.rounds)
    print(
        f"hf engine, tiny model, {args.rounds} rounds x {args.trajectories} three-turn trajectories, "
        f"prefix cache 2 GiB; {figures['cpu']}"
    )
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "session_memory", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
