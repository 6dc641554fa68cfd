"""What playing episodes through an external agent program costs (``env=agent``), one run, one table.

Run from the repo root::

    python benchmarks/agent_episodes.py                      # SmolLM2, 8 prompts x 8 samples, ~3 min on 2 cores
    python benchmarks/agent_episodes.py --model tiny --prompts 2 --samples 2 --json out.json

Three ways to play the same arithmetic episodes (one turn, the same rows, seeds and engine):

- ``in-process``: the ``arithmetic`` env inside the Generator (no HTTP, no process);
- ``agent, stdlib relay``: a program per episode that posts the task's messages to its session's
  ``/chat/completions`` with ``urllib`` and prints the reply; the ``arithmetic`` env judges the reply.
  Its tokens must equal the in-process ones (the session's seed is the episode's): the table's
  ``same tokens`` column counts the trajectories that do;
- ``agent, openai SDK``: the shipped calculator agent (``python -m aloft.gym.agents.calculator``: the
  official SDK, a tool offered, its own messages), judged the same way.

Columns: wall seconds for all episodes, episodes per second, and the ratio of each wall time to the
in-process one. The engine is warmed with one in-process round first. 2-core machines are noisy:
compare the ratios of one run, not seconds across runs.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from aloft.data import build_dataset, validate_row
from aloft.inference import make_engine
from aloft.models import build_tiny_model, load_tokenizer, resolve_model_path
from aloft.rollout import EpisodeLimits, Generator
from aloft.types import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

RELAY = textwrap.dedent(
    """
    import json, os, urllib.request
    task = json.load(open(os.environ["ALOFT_TASK_FILE"]))
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": task["prompt"]}).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request) as response:
        print(json.load(response)["choices"][0]["message"]["content"])
    """
)


def run(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="aloft-agent-bench-"))
    path = (
        resolve_model_path("smollm2-135m-instruct") if args.model == "smollm2" else build_tiny_model(scratch)
    )
    tokenizer = load_tokenizer(path)
    engine = make_engine("hf", model_or_path=path, tokenizer=tokenizer, dtype="float32")
    relay = scratch / "relay.py"
    relay.write_text(RELAY)
    judge = {"reward": "verifier", "verifier": "arithmetic"}
    modes = {
        "in-process": ("arithmetic", {}),
        "agent, stdlib relay": ("agent", {"command": [sys.executable, str(relay)], **judge}),
        "agent, openai SDK": (
            "agent",
            {"command": [sys.executable, "-m", "aloft.gym.agents.calculator"], **judge},
        ),
    }
    raw = build_dataset("arithmetic", n=args.prompts, seed=0)
    sampling = SamplingParams(max_tokens=args.max_new_tokens, temperature=1.0)
    limits = EpisodeLimits(max_turns=3, max_total_tokens=4 * args.max_new_tokens)

    def play(env_id: str, config: dict) -> tuple[float, list]:
        rows = [validate_row({**r, "env_class": env_id}, i, env_id) for i, r in enumerate(raw)]
        generator = Generator(engine, tokenizer, limits=limits, default_env_config=config)
        started = time.perf_counter()
        groups = generator.generate_sync(rows, n=args.samples, sampling=sampling, seed=1)
        return time.perf_counter() - started, [t for g in groups for t in g.trajectories]

    play(*modes["in-process"])  # warm-up: the engine's first batches
    results = []
    baseline = None
    for name, (env_id, config) in modes.items():
        seconds, trajectories = play(env_id, config)
        baseline = baseline or (seconds, trajectories)
        same = sum(
            t.completion_ids == b.completion_ids for t, b in zip(trajectories, baseline[1], strict=False)
        )
        results.append(
            {
                "mode": name,
                "seconds": seconds,
                "episodes": len(trajectories),
                "episodes_per_s": len(trajectories) / seconds,
                "ratio": seconds / baseline[0],
                "failed": sum(t.failed for t in trajectories),
                "same_tokens": same if "relay" in name else None,
                "reward_mean": sum(t.reward for t in trajectories) / len(trajectories),
            }
        )
    engine.close()
    figures = {
        "benchmark": "agent_episodes",
        "model": args.model,
        "prompts": args.prompts,
        "samples": args.samples,
        "max_new_tokens": args.max_new_tokens,
        "python": platform.python_version(),
        "results": results,
    }
    table = Table(
        ["mode", "seconds", "episodes/s", "vs in-process", "failed", "same tokens"],
        [
            [
                r["mode"],
                r["seconds"],
                r["episodes_per_s"],
                r["ratio"],
                r["failed"],
                None if r["same_tokens"] is None else f"{r['same_tokens']}/{r['episodes']}",
            ]
            for r in results
        ],
        ["{}", "{:.1f}", "{:.2f}", "{:.2f}x", "{}", "{}"],
        title=f"agent episodes: {args.model}, {args.prompts} prompts x {args.samples} samples, "
        f"<= {args.max_new_tokens} tokens",
    )
    print(table)
    if args.json:
        write_results(args.json, "agent_episodes", command_line(__file__, argv), figures, [table])
    return figures


def main(argv: list[str] | None = None) -> None:
    run(argv)


if __name__ == "__main__":
    main()
