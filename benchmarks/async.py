"""What overlapping buys: (a) concurrent multi-turn rollouts with a slow tool, (b) execution plans.

Run from the repo root::

    python benchmarks/async.py                       # both parts, ~3 min on 2 cores
    python benchmarks/async.py --parts rollouts      # (a) only
    python benchmarks/async.py --steps 6 --json out.json

(a) Rollouts. ``--trajectories`` multi-turn episodes through the real ``Generator`` and an embedded
``hf`` engine on a tiny model: each episode calls a tool that takes ``--tool-ms`` (a sleeping
``env.step``) on each of its first ``--tool-turns`` turns, then answers. *Concurrent*: all episodes
in flight at once (one ``generate`` call, as the trainer does); the engine batches the turns and the
tool calls overlap in the generator's env threads. *Sequential*: the same episodes, one at a time.

(b) Plans. The same ``aloft train`` run (tiny model, arithmetic prompts) under ``trainer.plan=sync``,
``one_step_off`` and ``fully_async`` with ``placement.backend=ray placement.mode=disaggregated``:
the learner and the engine are Ray actors with one core each, so generation and training can
really overlap. Per plan: the mean ``timing/step_s`` over the steps after the first two (warm-up),
and for ``sync`` the means of its generate and train stages; the target for ``one_step_off`` is a
step no longer than 1.15 x max(generate, train) of the sync run. Every plan runs the same update
(with truncated importance sampling, which the asynchronous plans require); ``in learner s`` is
the update's time inside the learner actor, ``train s`` the same seen from the driver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

TINY_SHAPE = {"hidden_size": 512, "num_layers": 8, "num_heads": 4, "num_kv_heads": 2}


# ---------------------------------------------------------------------------------------------------
# (a) rollouts with a slow tool
# ---------------------------------------------------------------------------------------------------


def slow_tool_env(tool_seconds: float, tool_turns: int) -> Any:
    from aloft.gym import Env, StepOutput

    class SlowToolEnv(Env):
        """Calls a tool that takes ``tool_seconds`` on each of the first ``tool_turns`` turns."""

        turn = 0

        def step(self, action: str) -> StepOutput:
            self.turn += 1
            if self.turn <= tool_turns:
                time.sleep(tool_seconds)  # a search request, a SQL query, a sandboxed run
                return StepOutput(
                    observations=[{"role": "tool", "content": "42"}], reward=0.0, done=False, info={}
                )
            return StepOutput(observations=[], reward=1.0, done=True, info={})

    return SlowToolEnv


async def rollouts(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    from aloft.data import DatasetRow
    from aloft.gym import register, registered
    from aloft.inference import make_engine
    from aloft.models import load_tokenizer
    from aloft.rollout import EpisodeLimits, Generator
    from aloft.types import SamplingParams

    if "bench_slow_tool" not in registered():
        register("bench_slow_tool", slow_tool_env(args.tool_ms / 1000, args.tool_turns))
    tokenizer = load_tokenizer(model_dir)
    engine = make_engine(
        "hf", model_or_path=model_dir, tokenizer=tokenizer, dtype="float32", max_batch_size=64
    )
    limits = EpisodeLimits(max_turns=args.tool_turns + 1, max_total_tokens=512)
    generator = Generator(engine, tokenizer, limits=limits)
    rows = [
        DatasetRow(
            prompt=[{"role": "user", "content": f"look up item {i}"}],
            env_class="bench_slow_tool",
            reward_spec=None,
            extra_info={},
            extras={},
            index=i,
        )
        for i in range(args.trajectories)
    ]
    sampling = SamplingParams(max_tokens=args.tokens, temperature=1.0)
    await generator.generate(rows[:4], n=1, sampling=sampling, seed=0)  # warm-up: threads, engine
    started = time.perf_counter()
    concurrent = await generator.generate(rows, n=1, sampling=sampling, seed=1)
    concurrent_s = time.perf_counter() - started
    started = time.perf_counter()
    sequential = [await generator.generate([row], n=1, sampling=sampling, seed=1) for row in rows]
    sequential_s = time.perf_counter() - started
    engine.close()
    turns = fmean(t.info["turns"] for g in concurrent for t in g.trajectories)
    assert all(
        t.reward == 1.0 for g in concurrent + [g for gs in sequential for g in gs] for t in g.trajectories
    )
    return {
        "trajectories": args.trajectories,
        "turns": turns,
        "tool_ms": args.tool_ms,
        "tool_turns": args.tool_turns,
        "concurrent_s": concurrent_s,
        "sequential_s": sequential_s,
        "speedup": sequential_s / concurrent_s,
    }


# ---------------------------------------------------------------------------------------------------
# (b) execution plans on disaggregated Ray actors
# ---------------------------------------------------------------------------------------------------

PLAN_OVERRIDES = {
    "sync": [],
    "one_step_off": ["trainer.plan=one_step_off"],
    "fully_async": ["trainer.plan=fully_async", "trainer.max_staleness=1"],
}
"""Every plan runs the same update, truncated importance sampling included (it costs a forward pass
for the pre-update logprobs), so the step times differ by the schedule alone."""


def plans(args: argparse.Namespace, model_dir: str, run_root: Path) -> dict[str, Any]:
    from aloft.config import load_config
    from aloft.tracking import read_metrics
    from aloft.trainer.trainer import run_dir_of, train

    base = [
        f"model.path={model_dir}",
        f"trainer.run_root={run_root}",
        "data.builder=arithmetic",
        "data.train_size=512",
        "data.eval_size=0",
        f"generator.max_new_tokens={args.tokens}",
        f"generator.max_total_tokens={args.tokens}",
        "generator.n_samples=4",
        f"trainer.prompts_per_step={args.prompts}",
        f"trainer.max_steps={args.steps}",
        "trainer.checkpoint_every=0",
        "trainer.export_final=false",
        "trainer.save_rollouts=false",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
        "placement.backend=ray",
        "placement.mode=disaggregated",
        "algorithm.off_policy_correction=tis_token",
    ]
    out: dict[str, Any] = {}
    for plan, overrides in PLAN_OVERRIDES.items():
        config = load_config(None, [*base, f"trainer.name={plan}", *overrides])
        train(config)
        rows = [r for r in read_metrics(run_dir_of(config) / "metrics.jsonl") if "timing/step_s" in r][2:]
        out[plan] = {
            key.removeprefix("timing/"): fmean(r[key] for r in rows)
            for key in (
                "timing/step_s",
                "timing/train_s",
                "timing/learner_s",
                "timing/sync_s",
                "timing/generate_s",
                "timing/wait_s",
            )
            if key in rows[0]
        }
        if plan != "sync":
            out[plan]["staleness_mean"] = fmean(r["async/staleness_mean"] for r in rows)
    bound = max(out["sync"]["generate_s"], out["sync"]["train_s"])
    for plan in PLAN_OVERRIDES:
        out[plan]["over_max_generate_train"] = out[plan]["step_s"] / bound
        out[plan]["speedup_over_sync"] = out["sync"]["step_s"] / out[plan]["step_s"]
    import ray

    ray.shutdown()
    return out


# ---------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------


def rollouts_table(r: dict[str, Any]) -> Table:
    return Table(
        ["rollout loop", "seconds", "speed-up"],
        [
            ["sequential (one episode at a time)", r["sequential_s"], 1.0],
            ["concurrent generator", r["concurrent_s"], r["speedup"]],
        ],
        ["{}", "{:.2f}", "{:.2f}"],
        title=f"(a) {r['trajectories']} episodes, {r['turns']:.1f} turns each, a {r['tool_ms']:.0f} ms tool "
        f"on {r['tool_turns']} of them (tiny model, hf engine)",
    )


def plans_tables(p: dict[str, Any], args: argparse.Namespace) -> list[Table]:
    """Each plan's step against sync's, and the sync run's stages (what ``one_step_off`` can overlap)."""
    columns = ["plan", "step s", "vs sync", "step / max(gen, train)", "train s", "in learner s", "sync s"]
    keys = ["step_s", "speedup_over_sync", "over_max_generate_train", "train_s", "learner_s", "sync_s"]
    plans = Table(
        [*columns, "staleness"],
        [
            [plan, *(p[plan][key] for key in keys), p[plan].get("staleness_mean", 0.0)]
            for plan in PLAN_OVERRIDES
        ],
        ["{}"] + ["{:.2f}"] * (len(keys) + 1),
        title=f"(b) {args.prompts} prompts x 4 samples per step, {args.tokens} tokens; learner and engine "
        "as Ray actors with one core each (disaggregated)",
    )
    sync = p["sync"]
    stages = Table(
        ["generate s", "train s", "sync s"],
        [[sync["generate_s"], sync["train_s"], sync["sync_s"]]],
        ["{:.2f}", "{:.2f}", "{:.3f}"],
        title="sync stages",
    )
    return [plans, stages]


# ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parts", default="rollouts,plans", help="rollouts, plans or both")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--tool-ms", type=float, default=200.0)
    parser.add_argument("--tool-turns", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32, help="completion tokens per turn / step")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (plans)")
    parser.add_argument("--steps", type=int, default=8, help="steps per plan (the first two are warm-up)")
    parser.add_argument("--hidden", type=int, default=TINY_SHAPE["hidden_size"], help="tiny model width")
    parser.add_argument("--layers", type=int, default=TINY_SHAPE["num_layers"], help="tiny model depth")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))

    from aloft.models import build_tiny_model

    figures: dict[str, Any] = {"benchmark": "async", "cpus": os.cpu_count()}
    tables: list[Table] = []
    with tempfile.TemporaryDirectory() as tmp:
        shape = {**TINY_SHAPE, "hidden_size": args.hidden, "num_layers": args.layers}
        model_dir = build_tiny_model(Path(tmp) / "tiny", seed=0, **shape)
        figures["model"] = shape
        if "rollouts" in parts:
            r = figures["rollouts"] = asyncio.run(rollouts(args, model_dir))
            tables.append(rollouts_table(r))
            print(tables[-1], end="\n\n")
        if "plans" in parts:
            p = figures["plans"] = plans(args, model_dir, Path(tmp) / "runs")
            tables += plans_tables(p, args)
            print("\n\n".join(str(table) for table in tables[-2:]))
    if args.json:
        write_results(args.json, "async", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
