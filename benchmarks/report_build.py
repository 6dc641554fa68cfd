"""`aloft report` at scale: build time, file size and the page's load time in headless Chromium.

Run from the repo root (needs Chromium: scripts/install_chromium.sh)::

    python benchmarks/report_build.py                          # 200 steps x 64 samples x 256 tokens
    python benchmarks/report_build.py --steps 20 --samples 8   # seconds

A real run of the tiny model (2 steps) gives the records; the benchmark writes a run of ``--steps``
steps with ``--samples`` trajectories each (the real records with ``--tokens``-token completions of
random ids and logprobs, see ``lengthened``; the real metrics rows renumbered), then builds its report keeping
``--keep`` trajectories per step (and all of them), and opens each page in Chromium: seconds to
build, MB, seconds until the page is drawn, and seconds to show a trajectory of the last step.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aloft.config import load_config
from aloft.models import build_tiny_model
from aloft.report import build_report
from aloft.trainer.trainer import train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results


def source_run(directory: Path) -> Path:
    """A real 2-step run of the tiny model, 16 samples a step."""
    model = build_tiny_model(directory / "tiny", hidden_size=64, num_layers=2, seed=0)
    overrides = [
        f"model.path={model}",
        f"trainer.run_root={directory}",
        "trainer.name=source",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "trainer.max_steps=2",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=0",
        "trainer.export_final=false",
        "trainer.prompts_per_step=4",
        "generator.n_samples=4",
        "generator.max_new_tokens=16",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
        "data.builder=arithmetic",
        "data.train_size=16",
        "data.eval_size=4",
    ]
    train(load_config("quickstart", overrides))
    return directory / "source"


def lengthened(record: dict[str, Any], tokens: int, rng: random.Random) -> dict[str, Any]:
    """``record`` with a ``tokens``-token completion of random ids and logprobs (random, so the page's
    gzip gets no help from repeats: sizes are an upper bound) in three turns: the policy's 45%, an
    env observation's 20% (not trained), the policy's 35%."""
    mask = [1] * (tokens * 45 // 100) + [0] * (tokens * 20 // 100)
    mask += [1] * (tokens - len(mask))
    sampler = [round(-abs(rng.gauss(0, 2)), 4) for _ in range(tokens)]
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8))) for _ in range(tokens)]
    return {
        **record,
        "completion_ids": [rng.randrange(49152) for _ in range(tokens)],
        "loss_mask": mask,
        "sampler_logprobs": sampler,
        "trainer_logprobs": [round(x + rng.gauss(0, 1e-5), 4) for x in sampler],
        "rewards": [0.0] * (tokens - 1) + [record["reward"]],
        "completion": " ".join(words),
    }


def synthesize(source: Path, target: Path, steps: int, samples: int, tokens: int) -> None:
    """A ``steps``-step run from ``source``'s real records and metrics rows."""
    target.mkdir(parents=True)
    shutil.copy(source / "config.yaml", target / "config.yaml")
    rows = [json.loads(line) for line in (source / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "policy/loss" in r]
    eval_rows = [r for r in rows if "eval/reward/mean" in r]
    start = train_rows[0]["time"]
    records = [json.loads(line) for line in (source / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    variants = [lengthened(records[k % len(records)], tokens, rng) for k in range(4 * samples)]
    (target / "rollouts").mkdir()
    with (target / "metrics.jsonl").open("w") as metrics:
        for step in range(1, steps + 1):
            row = {**train_rows[step % len(train_rows)], "step": step, "time": start + 30 * step}
            metrics.write(json.dumps(row) + "\n")
            if step % 10 == 0:
                metrics.write(
                    json.dumps({**eval_rows[-1], "step": step, "time": start + 30 * step + 5}) + "\n"
                )
            with (target / "rollouts" / f"step_{step}.jsonl").open("w") as f:
                for k in range(samples):
                    record = variants[(step * samples + k) % len(variants)]
                    f.write(json.dumps({**record, "group_id": f"s{step}g{k // 4}"}) + "\n")


def open_in_chromium(page_path: Path, last_step: int) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Chromium: bash scripts/install_chromium.sh")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        started = time.perf_counter()
        page.goto(page_path.resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=120_000)
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        page.select_option("#f-step", str(last_step))
        page.click("#traj-list li[data-index='0']")
        page.wait_for_selector("#traj-view .tok", state="attached")
        shown = time.perf_counter() - started
        browser.close()
    return loaded, shown


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument(
        "--keep", type=int, default=32, help="trajectories per step in the page (the default)"
    )
    parser.add_argument(
        "--all", action=argparse.BooleanOptionalAction, default=True, help="also build a page of every sample"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="aloft-report-bench-"))
    try:
        run = work / "big"
        synthesize(source_run(work), run, args.steps, args.samples, args.tokens)
        rollouts_mb = sum(p.stat().st_size for p in (run / "rollouts").iterdir()) / 1e6
        rows = {}
        for keep in sorted({args.keep, args.samples} if args.all else {args.keep}):
            out = work / f"report-{keep}.html"
            started = time.perf_counter()
            build_report([run], out, samples_per_step=keep)
            built = time.perf_counter() - started
            loaded, shown = open_in_chromium(out, args.steps)
            rows[keep] = {"build_s": built, "mb": out.stat().st_size / 1e6, "load_s": loaded, "show_s": shown}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {
        "benchmark": "report_build",
        "steps": args.steps,
        "samples": args.samples,
        "tokens": args.tokens,
        "rollouts_mb": rollouts_mb,
        "pages": {str(k): v for k, v in rows.items()},
    }
    keys = ("build_s", "mb", "load_s", "show_s")
    tables = [
        Table(
            ["kept per step", "build s", "MB", "load s", "show s"],
            [[keep, *(row[key] for key in keys)] for keep, row in rows.items()],
            ["{}", "{:.2f}", "{:.1f}", "{:.2f}", "{:.2f}"],
            title=f"aloft report of {args.steps} steps x {args.samples} samples x {args.tokens} tokens "
            f"(rollouts files: {rollouts_mb:.0f} MB)",
        )
    ]
    if len(rows) == 2:
        small, big = rows[min(rows)], rows[max(rows)]
        tables.append(
            Table(
                ["build", "size", "load"],
                [
                    [
                        big["build_s"] / small["build_s"],
                        big["mb"] / small["mb"],
                        big["load_s"] / small["load_s"],
                    ]
                ],
                ["{:.2f}", "{:.2f}", "{:.2f}"],
                title=f"ratio (all / {min(rows)})",
            )
        )
    print("\n\n".join(str(table) for table in tables))
    if args.json:
        write_results(args.json, "report_build", command_line(__file__, argv), figures, tables)
    return figures


if __name__ == "__main__":
    main()
