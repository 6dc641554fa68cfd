"""Env steps per second for each built-in env with 64 trajectories in flight, and the sandbox's overhead per call.

Run from the repo root::

    python benchmarks/env_throughput.py                                  # every env, ~1-2 min on 2 cores
    python benchmarks/env_throughput.py --envs code,text2sql --seconds 5 --json out.json
    python benchmarks/env_throughput.py --envs arithmetic --in-flight 8 --rounds 3 --sandbox-calls 0

Envs. Each built-in env runs through the real ``Generator`` (one coroutine per trajectory, every env
call off the event loop in a thread via ``asyncio.to_thread``) with the model-free ``scripted`` engine
replaying ``aloft.gym.envs.EXAMPLE_REPLIES[env]`` (a tool call, then an answer), so the policy costs
nothing and what is left is the env and the generator around it. Rows come from the env's preset
(``env=<id>`` overlay, its data builder and env config, ``max_turns`` = number of scripted replies);
prompts are tokenized with the tiny byte-level ChatML tokenizer (``aloft.models.build_tiny_tokenizer``).

A *round* is ``--in-flight`` rows (one trajectory each). Concurrent: every round's trajectories are in
flight together (one ``generate`` call, as the trainer does for a batch). Sequential: the same rows, one
trajectory at a time. A concurrent warm-up round of 16 rows (it starts the thread pool, loads the
search index and opens the databases) is left out. Then concurrent rounds repeat until
``--seconds`` have passed (or exactly ``--rounds``), and the sequential pass runs the same number of
rounds, so both columns cover the same episodes.

Timing. Wall time of each pass (``time.perf_counter``). ``env.step`` latency is timed inside the
worker thread by a thin wrapper around each env, so it excludes the trip to and from the thread; that
trip is ``hop ms``: the generator's own per-trajectory ``env_seconds`` (which spans the whole
``await asyncio.to_thread(env.step, ...)``) minus the wrapper's time, per step, i.e. waiting for a
free thread plus waiting for the busy event loop to resume the trajectory. The sequential pass splits
its wall time into ``env.step``, the env's other calls (construction, ``reset``, ``metrics``, ``close``) and the rest:
the generator's own work (chat template, tokenization, the scripted engine's prompt decode, thread
hops, asyncio). ``steps in flight`` is the concurrent pass's total step latency over its wall time
(the mean number of ``env.step`` calls running at once); ``loop CPU`` is the event-loop thread's CPU
time over wall time: near 100% means the generator's loop, not the env, is the bottleneck; ``proc CPU``
is this process's CPU time (every thread, not the sandbox's child processes) over wall time.

The scripted replies are fixed, so an env's figures are those of that one path through it: the
``math`` and ``math_tool`` answers and their ground truths are integers, which the grader compares
without its math_verify workers; ``code`` and ``code_feedback`` run one sandboxed test program per step.

``asyncio.to_thread`` uses the loop's default executor, ``min(32, CPUs + 4)`` threads, so at most that
many env calls run at once however many trajectories are in flight (the header prints it;
``--env-threads N`` gives the loop a pool of N instead, to see what a bigger one would buy).

Sandbox. ``run_python`` (the strongest mode this host allows, printed in the header) against a plain
``subprocess.run([python, "-c", code])``, the same with ``-I -S`` (the sandbox's interpreters skip
``site``), and in-process ``exec``, one call at a time, for ``pass`` and for a small HumanEval-sized
program (a function and its asserts). Figures are the median ms per call over ``--sandbox-calls``
calls, after one warm-up call each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

SMALL_PROGRAM = """\
def running_max(numbers):
    out, best = [], None
    for n in numbers:
        best = n if best is None else max(best, n)
        out.append(best)
    return out


assert running_max([]) == []
assert running_max([1, 2, 3, 2, 3, 4, 2]) == [1, 2, 3, 3, 3, 4, 4]
assert running_max([4, 3, 2, 1]) == [4, 4, 4, 4]
print("ok")
"""
"""A HumanEval-sized program: what the code env runs per test (a function, then its asserts)."""
WARMUP_ROWS = 16
"""Rows of the (concurrent) warm-up round: enough to start every env thread."""
SANDBOX_PROGRAMS = {"pass": "pass", "small program": SMALL_PROGRAM}


# ---------------------------------------------------------------------------------------------------
# Envs through the Generator
# ---------------------------------------------------------------------------------------------------


class EnvTimings:
    """Seconds spent in each env call, appended from the worker threads (list.append is atomic)."""

    def __init__(self) -> None:
        self.step: list[float] = []
        self.other: list[float] = []  # construction, reset, metrics, close

    def clear(self) -> None:
        self.step.clear()
        self.other.clear()


class TimedEnv:
    """Delegates to an env, timing each call where it runs (in the generator's worker thread)."""

    def __init__(self, env: Any, timings: EnvTimings) -> None:
        self.env, self.timings = env, timings

    def _timed(self, into: list[float], call: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            into.append(time.perf_counter() - start)

    def reset(self, prompt: Any) -> Any:
        return self._timed(self.timings.other, self.env.reset, prompt)

    def step(self, action: str) -> Any:
        return self._timed(self.timings.step, self.env.step, action)

    def metrics(self) -> Any:
        return self._timed(self.timings.other, self.env.metrics)

    def close(self) -> None:
        self._timed(self.timings.other, self.env.close)


def env_rows(env_id: str, n: int) -> tuple[Any, list[Any]]:
    """The env's preset config and ``n`` validated rows from its data builder (as the trainer builds them)."""
    from aloft.config import load_config
    from aloft.data import build_dataset, validate_row

    cfg = load_config(None, [f"env={env_id}"])
    raw = build_dataset(cfg.data.builder or "arithmetic", n=n, seed=0, **cfg.data.builder_args)
    return cfg, [validate_row({**r, "env_class": env_id}, i, env_id) for i, r in enumerate(raw)]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def env_threads(args: argparse.Namespace) -> int:
    """Threads that run env calls: ``--env-threads``, else asyncio's default executor's size."""
    return args.env_threads or min(32, (os.cpu_count() or 1) + 4)


def bench_env(env_id: str, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One env: a warm-up round, concurrent rounds, then as many sequential rounds; every figure."""
    from aloft.gym import make
    from aloft.gym.envs import EXAMPLE_REPLIES
    from aloft.inference import make_engine
    from aloft.rollout import EpisodeLimits, Generator
    from aloft.types import RolloutStatus, SamplingParams

    replies = EXAMPLE_REPLIES[env_id]
    cfg, rows = env_rows(env_id, args.in_flight)
    env_config = {**cfg.env.config, "max_turns": len(replies)}
    timings = EnvTimings()

    def timed_make(env_class: str, config: Any, extras: Any) -> TimedEnv:
        start = time.perf_counter()
        env = make(env_class, config, extras)
        timings.other.append(time.perf_counter() - start)
        return TimedEnv(env, timings)

    gen = Generator(
        make_engine("scripted", tokenizer=tokenizer, replies=replies),
        tokenizer,
        limits=EpisodeLimits(max_turns=len(replies), max_total_tokens=100_000),
        default_env_config=env_config,
        env_factory=timed_make,
    )
    sampling = SamplingParams(max_tokens=512)

    async def one_round(in_flight: int, round_rows: list[Any] = rows) -> list[Any]:
        trajectories = []
        for start in range(0, len(round_rows), in_flight):
            batch = round_rows[start : start + in_flight]
            groups = await gen.generate(batch, n=1, sampling=sampling, seed=0)
            trajectories += [t for g in groups for t in g.trajectories]
        return trajectories

    async def measure(in_flight: int, rounds: int | None) -> dict[str, Any]:
        """``rounds`` rounds, or (None) as many as fit in ``--seconds`` (at least one)."""
        timings.clear()
        trajectories: list[Any] = []
        done = 0
        cpu_start, proc_start, start = time.thread_time(), time.process_time(), time.perf_counter()
        while (rounds is None and (done == 0 or time.perf_counter() - start < args.seconds)) or (
            rounds is not None and done < rounds
        ):
            trajectories += await one_round(in_flight)
            done += 1
        wall = time.perf_counter() - start
        loop_cpu, proc_cpu = time.thread_time() - cpu_start, time.process_time() - proc_start
        steps, other = list(timings.step), list(timings.other)
        n_steps = len(steps)
        env_seconds = sum(t.info["env_seconds"] for t in trajectories)
        errors = [t for t in trajectories if t.status is RolloutStatus.ENV_ERROR]
        return {
            "in_flight": min(in_flight, len(rows)),
            "rounds": done,
            "episodes": len(trajectories),
            "env_steps": n_steps,
            "env_errors": len(errors),
            "first_error": errors[0].info.get("error") if errors else None,
            "wall_s": wall,
            "episodes_per_s": len(trajectories) / wall,
            "env_steps_per_s": n_steps / wall,
            "step_ms_mean": 1e3 * statistics.fmean(steps) if steps else float("nan"),
            "step_ms_p95": 1e3 * percentile(steps, 0.95),
            "hop_ms_mean": 1e3 * (env_seconds - sum(steps)) / n_steps if n_steps else float("nan"),
            "step_share": sum(steps) / wall,
            "env_other_share": sum(other) / wall,
            "generator_share": 1.0 - (sum(steps) + sum(other)) / wall,
            "steps_in_flight": sum(steps) / wall,
            "loop_cpu_share": loop_cpu / wall,
            "process_cpu_share": proc_cpu / wall,
            "mean_turns": statistics.fmean(t.info["turns"] for t in trajectories),
            "mean_reward": statistics.fmean(sum(t.rewards) for t in trajectories),
        }

    async def run_all() -> dict[str, Any]:
        if args.env_threads:
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(args.env_threads))
        warmup_start = time.perf_counter()
        await one_round(args.in_flight, rows[:WARMUP_ROWS])
        warmup_s = time.perf_counter() - warmup_start
        concurrent = await measure(args.in_flight, args.rounds)
        sequential = await measure(1, concurrent["rounds"])
        return {"warmup_s": warmup_s, "concurrent": concurrent, "sequential": sequential}

    result = asyncio.run(run_all())
    concurrent, sequential = result["concurrent"], result["sequential"]
    return {
        "env": env_id,
        "replies": len(replies),
        **result,
        "speedup": concurrent["episodes_per_s"] / sequential["episodes_per_s"],
    }


# ---------------------------------------------------------------------------------------------------
# Sandbox overhead per call
# ---------------------------------------------------------------------------------------------------


def median_ms(call: Any, calls: int) -> float:
    """Median wall ms of ``call()`` over ``calls`` calls, after one warm-up call."""
    call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench_sandbox(calls: int) -> tuple[str, list[dict[str, Any]]]:
    """(mode summary, one row per program: in-process exec, subprocess, sandbox ms per call)."""
    from aloft.gym.sandbox import SandboxError, run_python, sandbox_capabilities

    try:
        mode = sandbox_capabilities().summary()
    except SandboxError as error:
        return f"unavailable ({error})", []
    rows = []
    for name, code in SANDBOX_PROGRAMS.items():
        compiled = compile(code, "main.py", "exec")

        def in_process(compiled: Any = compiled) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compiled, {"__name__": "__main__"})

        def plain(code: str = code, flags: tuple[str, ...] = ()) -> None:
            subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, check=True)

        def sandboxed(code: str = code) -> None:
            result = run_python(code)
            if not result.ok:
                raise RuntimeError(f"sandbox run failed: {result.stderr[-500:]}")

        code_ms = 1e3 * statistics.median(run_python(code).elapsed_s for _ in range(min(calls, 3)))
        row = {
            "program": name,
            "exec_ms": median_ms(in_process, calls),
            "subprocess_ms": median_ms(plain, calls),
            "subprocess_isolated_ms": median_ms(lambda code=code: plain(code, ("-I", "-S")), calls),
            "sandbox_ms": median_ms(sandboxed, calls),
            "sandbox_code_ms": code_ms,
        }
        row["ratio_sandbox_over_subprocess"] = row["sandbox_ms"] / row["subprocess_ms"]
        row["ratio_sandbox_over_isolated_subprocess"] = row["sandbox_ms"] / row["subprocess_isolated_ms"]
        row["sandbox_setup_ms"] = row["sandbox_ms"] - code_ms
        rows.append(row)
    return mode, rows


# ---------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------


def env_table(results: list[dict[str, Any]], in_flight: int) -> Table:
    c, s = "concurrent", "sequential"
    columns = [
        ("env", "env", "{}"),
        ("turns", lambda r: r[c]["mean_turns"], "{:.1f}"),
        ("episodes", lambda r: r[c]["episodes"], "{}"),
        ("eps/s 1", lambda r: r[s]["episodes_per_s"], "{:.1f}"),
        (f"eps/s {in_flight}", lambda r: r[c]["episodes_per_s"], "{:.1f}"),
        ("speed-up", "speedup", "{:.2f}x"),
        (f"steps/s {in_flight}", lambda r: r[c]["env_steps_per_s"], "{:.1f}"),
        ("step ms 1", lambda r: r[s]["step_ms_mean"], "{:.2f}"),
        (f"step ms {in_flight}", lambda r: r[c]["step_ms_mean"], "{:.2f}"),
        ("p95", lambda r: r[c]["step_ms_p95"], "{:.2f}"),
        ("hop ms", lambda r: r[c]["hop_ms_mean"], "{:.2f}"),
        ("in flight", lambda r: r[c]["steps_in_flight"], "{:.2f}"),
        ("loop CPU", lambda r: r[c]["loop_cpu_share"], "{:.0%}"),
        ("proc CPU", lambda r: r[c]["process_cpu_share"], "{:.0%}"),
        ("step % 1", lambda r: r[s]["step_share"], "{:.0%}"),
        ("env other % 1", lambda r: r[s]["env_other_share"], "{:.0%}"),
        ("generator % 1", lambda r: r[s]["generator_share"], "{:.0%}"),
    ]
    return Table.of_records(columns, results)


def sandbox_table(rows: list[dict[str, Any]]) -> Table:
    columns = [
        ("program", "program", "{}"),
        ("exec ms", "exec_ms", "{:.3f}"),
        ("python -c ms", "subprocess_ms", "{:.1f}"),
        ("python -I -S -c ms", "subprocess_isolated_ms", "{:.1f}"),
        ("sandbox ms", "sandbox_ms", "{:.1f}"),
        ("sandbox / python -c", "ratio_sandbox_over_subprocess", "{:.2f}x"),
        ("sandbox / -I -S", "ratio_sandbox_over_isolated_subprocess", "{:.2f}x"),
        ("sandbox code ms", "sandbox_code_ms", "{:.1f}"),
    ]
    return Table.of_records(columns, rows)


# ---------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from aloft.gym.envs import BUILTIN_ENVS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", default="all", help="comma-separated env ids (default: all built-in envs)")
    parser.add_argument(
        "--in-flight", type=int, default=64, help="trajectories in flight at once (= rows per round)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="measured rounds per env (default: as many concurrent rounds as fit in --seconds)",
    )
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="concurrent seconds per env when --rounds is not given"
    )
    parser.add_argument(
        "--env-threads",
        type=int,
        default=0,
        help="threads for env calls (default 0: asyncio's default executor, min(32, CPUs + 4), as in training)",
    )
    parser.add_argument(
        "--sandbox-calls", type=int, default=10, help="calls per sandbox figure (0: skip the sandbox part)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    envs = sorted(BUILTIN_ENVS) if args.envs == "all" else args.envs.split(",")
    unknown = sorted(set(envs) - set(BUILTIN_ENVS))
    if unknown:
        parser.error(f"--envs: unknown {unknown}; choose from {sorted(BUILTIN_ENVS)}")
    args.envs = envs
    if args.in_flight < 1 or (args.rounds is not None and args.rounds < 1) or args.seconds <= 0:
        parser.error("--in-flight and --rounds must be >= 1, --seconds > 0")
    if args.sandbox_calls < 0 or args.env_threads < 0:
        parser.error("--sandbox-calls and --env-threads must be >= 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from aloft.gym.envs.math_grading import default_grader
    from aloft.models import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    sandbox_calls = args.sandbox_calls
    if sandbox_calls:
        print(f"sandbox: {sandbox_calls} calls per figure ...", flush=True)
    sandbox_mode, sandbox_rows = bench_sandbox(sandbox_calls) if sandbox_calls else ("skipped", [])
    grader_workers = default_grader().max_workers if {"math", "math_tool"} & set(args.envs) else None
    header = (
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{env_threads(args)} env threads"
        + ("" if args.env_threads else " (asyncio's default executor)")
        + f"; sandbox mode {sandbox_mode}"
        + (f"; math grader workers {grader_workers}" if grader_workers else "")
    )
    print(header, flush=True)

    results = []
    for env_id in args.envs:
        started = time.perf_counter()
        print(f"{env_id}: {args.in_flight} in flight ...", end=" ", flush=True)
        result = bench_env(env_id, tokenizer, args)
        results.append(result)
        print(f"{time.perf_counter() - started:.0f} s", flush=True)
        for mode in ("concurrent", "sequential"):
            if result[mode]["env_errors"]:
                print(
                    f"  warning: {result[mode]['env_errors']} env errors ({mode}), "
                    f"e.g. {result[mode]['first_error']}",
                    flush=True,
                )

    n = args.in_flight
    tables = [env_table(results, n)]
    print()
    print(header)
    print(tables[0])
    legend = [
        f"1 / {n} = trajectories in flight (sequential / concurrent: the same episodes; warm-up excluded); "
        "turns = env steps per episode;",
        f"step ms = mean env.step latency, timed in its thread (p95 at {n} in flight); hop ms = the generator's "
        "to_thread round trip per step minus the step;",
        "in flight = mean env.step calls running at once; loop / proc CPU = event-loop thread / whole process "
        "CPU time over wall time;",
        "step / env other / generator % 1 = the sequential wall time spent in env.step, in the env's other calls "
        "(make, reset, metrics, close),",
        "and in the generator itself (chat template, tokenization, the scripted engine, thread hops).",
    ]
    print("\n" + "\n".join(legend))
    if sandbox_rows:
        tables.append(sandbox_table(sandbox_rows))
        print()
        print(tables[-1])
        print(
            f"\nmedian ms per call over {sandbox_calls} calls, one at a time; sandbox code ms = the "
            "program's own run time inside the sandbox (SandboxResult.elapsed_s)."
        )
    figures = {
        "benchmark": "env_throughput",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "env_threads": env_threads(args),
        "math_grader_workers": grader_workers,
        "in_flight": n,
        "sandbox_mode": sandbox_mode,
        "sandbox_calls": sandbox_calls,
        "results": results,
        "sandbox": sandbox_rows,
    }
    if args.json is not None:
        write_results(args.json, "env_throughput", command_line(__file__, argv), figures, tables)
        print(f"figures written to {args.json}")
    return figures


if __name__ == "__main__":
    main()
