"""The quick start as a benchmark: ``aloft train quickstart`` run as the README writes it, timed,
with its held-out eval reward and each step's generation and update seconds read from the run's own
metrics.

    python benchmarks/quickstart.py --json benchmarks/results/quickstart.json
    python benchmarks/quickstart.py trainer.max_steps=4      # overrides go to the run as given

It prints two tables, the same ones it writes: the eval reward at each eval step with the seconds of
the steps up to it, and the whole command (its wall time, from start to the export on disk, and the
median generation and update seconds a step). The run goes into a scratch directory, removed after
(``--keep DIR`` keeps it). On a machine with native bf16 the preset's ``auto`` precision runs bf16,
elsewhere float32; the JSON records which, with the CPU.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path: its siblings
from result_tables import Table, command_line, write_results

RUN_NAME = "quickstart"


def run_quickstart(run_root: Path, overrides: list[str]) -> float:
    """Run ``aloft train quickstart`` into ``run_root / RUN_NAME`` in a subprocess (as a user would:
    a fresh process that loads everything itself) and return its wall time in seconds."""
    command = [
        sys.executable,
        "-m",
        "aloft.cli",
        "train",
        "quickstart",
        f"trainer.run_root={run_root}",
        f"trainer.name={RUN_NAME}",
        "trainer.progress_bar=false",
        *overrides,
    ]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def step_records(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The run's ``metrics.jsonl`` merged by step (a step's eval and training lines are one record)."""
    from aloft.tracking import read_metrics

    steps: dict[int, dict[str, Any]] = {}
    for record in read_metrics(run_dir / "metrics.jsonl"):
        steps.setdefault(int(record["step"]), {}).update(record)
    return steps


def summarize(run_dir: Path, wall_s: float) -> dict[str, Any]:
    """The figures of one run: per eval step, the reward and the seconds of the steps since the last
    eval (generation, update, whole steps); for the run, the wall time, medians and precision."""
    steps = step_records(run_dir)
    trained = sorted(step for step, record in steps.items() if "timing/step_s" in record)
    evals, since = [], 0
    for step in sorted(step for step, record in steps.items() if "eval/reward/mean" in record):
        window = [steps[s] for s in trained if since < s <= step]
        evals.append(
            {
                "step": step,
                "eval_reward": steps[step]["eval/reward/mean"],
                "generate_s": sum(r["timing/generate_s"] for r in window),
                "update_s": sum(r["timing/train_s"] for r in window),
                "steps_s": sum(r["timing/step_s"] for r in window),
            }
        )
        since = step
    from aloft.trainer.run_precision import recorded_precision

    precision = recorded_precision(run_dir)
    return {
        "steps": len(trained),
        "wall_s": wall_s,
        "precision": precision,
        "generate_s_median": statistics.median(steps[s]["timing/generate_s"] for s in trained),
        "update_s_median": statistics.median(steps[s]["timing/train_s"] for s in trained),
        "step_s_median": statistics.median(steps[s]["timing/step_s"] for s in trained),
        "evals": evals,
    }


def tables(figures: dict[str, Any]) -> list[Table]:
    dtype = figures["precision"]["engine.dtype"]
    by_step = Table.of_records(
        [
            ("step", "step", "{}"),
            ("eval reward", "eval_reward", "{:.3f}"),
            ("generation s", "generate_s", "{:.1f}"),
            ("update s", "update_s", "{:.1f}"),
            ("steps s", "steps_s", "{:.1f}"),
        ],
        figures["evals"],
    )
    by_step.title = (
        f"quick start ({dtype}): held-out eval reward at each eval step; seconds of the steps since the "
        "eval before"
    )
    whole = Table(
        ["precision", "steps", "whole command s", "generation s / step", "update s / step", "step s"],
        [
            [
                dtype,
                figures["steps"],
                figures["wall_s"],
                figures["generate_s_median"],
                figures["update_s_median"],
                figures["step_s_median"],
            ]
        ],
        ["{}", "{}", "{:.0f}", "{:.2f}", "{:.2f}", "{:.2f}"],
        title="quick start, whole command (wall time) and medians a step",
    )
    return [by_step, whole]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", help="section.key=value overrides for the run")
    parser.add_argument("--keep", type=Path, default=None, help="run into this directory and keep it")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)

    root = args.keep or Path(tempfile.mkdtemp(prefix="aloft-bench-quickstart-"))
    try:
        wall_s = run_quickstart(root, args.overrides)
        figures = {"benchmark": "quickstart", "overrides": args.overrides, **summarize(root / RUN_NAME, wall_s)}
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    shown = tables(figures)
    for table in shown:
        print(table, end="\n\n")
    if args.json:
        write_results(args.json, "quickstart", command_line(__file__, argv), figures, shown)
        print(f"figures written to {args.json}")
    return figures


if __name__ == "__main__":
    main()
