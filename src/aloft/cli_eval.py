"""``aloft eval`` on the command line: its arguments, and the command (one model, or two compared).

Also the ``-o KEY=VALUE`` dataset-builder options that ``aloft data build`` shares.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aloft.cli_errors import yaml_problem


def add_eval_parser(sub: Any, add_debug: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``eval`` subcommand's arguments on ``sub`` (argparse subparsers)."""
    ev = sub.add_parser(
        "eval",
        help="mean reward and pass@k of a model, run or checkpoint (LoRA too, unexported) on a dataset",
    )
    ev.add_argument(
        "model",
        help="model dir, built-in name, run dir (its export/ or latest checkpoint) or checkpoint dir; "
        "a run or checkpoint brings its run's env config, stop strings, limits, engine and eval rows",
    )
    ev.add_argument("--data", nargs="*", default=[], help="eval files (.jsonl/.parquet)")
    ev.add_argument(
        "--builder", default=None, help="built-in dataset builder when no --data (e.g. arithmetic)"
    )
    ev.add_argument(
        "--size", type=int, default=64, help="rows to build / evaluate (0: every row of a fixed dataset)"
    )
    ev.add_argument("--split", default="eval", help="builder split (sql: eval or heldout)")
    add_builder_options(ev, example="max_turns=1")
    ev.add_argument(
        "--stop", action="append", default=None, help="a stop string, repeatable (e.g. --stop '</sql>')"
    )
    ev.add_argument("--seed", type=int, default=1_000_003, help="builder and sampling seed")
    ev.add_argument("--env", default=None, help="env id for every row (default: each row's env_class)")
    ev.add_argument("--env-config", default=None, help="the env's config as YAML, e.g. '{max_turns: 3}'")
    ev.add_argument("--n", type=int, default=1, help="samples per prompt (pass@k for every k up to n)")
    ev.add_argument("--temperature", type=float, default=0.0)
    ev.add_argument("--max-new-tokens", type=int, default=None, help="per turn (default: the run's, or 64)")
    ev.add_argument("--max-turns", type=int, default=None, help="turn limit (default: the run's, or 1)")
    ev.add_argument(
        "--max-total-tokens", type=int, default=None, help="whole completion (default: the run's)"
    )
    ev.add_argument(
        "--backend", default=None, help="inference engine: hf, vllm, remote, ... (default: the run's, or hf)"
    )
    ev.add_argument(
        "--url", action="append", default=None, help="server URL for --backend remote, repeatable"
    )
    ev.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default=None)
    ev.add_argument(
        "--rollouts",
        default=None,
        help="write the eval trajectories here (default for a run: RUN/eval/<which>.jsonl)",
    )
    ev.add_argument(
        "--compare",
        default=None,
        metavar="OTHER",
        help="a second model, run or checkpoint on the same rows and settings (the first's): the "
        "paired gain in items solved, its 95%% CI and the exact McNemar p (needs --n 1)",
    )
    ev.add_argument(
        "--solved-reward",
        type=float,
        default=None,
        help="--compare: an item is solved when its reward reaches this (default: as pass@1 counts "
        "it, the env's correct metric or a reward above 0)",
    )
    ev.add_argument(
        "--comparison-out", default=None, help="--compare: write the per-item outcomes and the result here"
    )
    add_debug(ev)


def run_eval_command(args: argparse.Namespace) -> int:
    """``aloft eval``: one model's scores, or two compared item by item (``--compare``)."""
    from aloft.data import build_dataset, read_rows, validate_row
    from aloft.trainer.eval_command import (
        EvalSettings,
        default_rollouts_path,
        resolve_eval_source,
        run_eval,
        write_eval_rollouts,
    )

    source = resolve_eval_source(args.model)
    if args.data:
        rows = [r for path in args.data for r in read_rows(path, default_env=args.env)]
    elif args.builder:
        raw = build_dataset(
            args.builder, n=args.size, seed=args.seed, split=args.split, **builder_options(args.options)
        )
        rows = [
            validate_row(r, i, f"builder {args.builder}", default_env=args.env) for i, r in enumerate(raw)
        ]
    else:
        rows = source.eval_rows(args.env)
    if not rows:
        raise ValueError("eval needs rows: --data FILE, --builder NAME, or a run that has eval rows")
    env_config = _env_config(args.env_config)
    rows = rows[: args.size] if args.data and args.size > 0 else rows
    if args.env:
        for row in rows:
            row.env_class = args.env
    settings = EvalSettings(
        n=args.n,
        temperature=args.temperature,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        max_turns=args.max_turns,
        max_total_tokens=args.max_total_tokens,
        stop=args.stop,
        env_config=env_config,
        backend=args.backend,
        urls=args.url,
        dtype=args.dtype,
    )
    if args.compare is not None:
        return _compare(args, source, rows, settings)
    metrics, groups, tokenizer = run_eval(source, rows, settings)
    rollouts = Path(args.rollouts) if args.rollouts else default_rollouts_path(source)
    if rollouts is not None:
        write_eval_rollouts(rollouts, groups, tokenizer)
        print(f"aloft: eval trajectories in {rollouts}", file=sys.stderr)
    print(json.dumps({k: round(v, 4) for k, v in metrics.items()}, indent=1))
    return 0


def _compare(args: argparse.Namespace, source: Any, rows: list[Any], settings: Any) -> int:
    """``--compare``: both sides on ``rows`` with the first side's resolved settings, then the paired
    comparison (``aloft.trainer.paired``); each side's trajectories go to its run's ``eval/``."""
    from aloft.trainer.eval_command import (
        default_rollouts_path,
        resolve_eval_source,
        run_eval,
        write_eval_rollouts,
    )
    from aloft.trainer.paired import compare, solved_by_item

    if args.n != 1:
        raise ValueError(f"--compare pairs one sample an item: use --n 1 (got --n {args.n})")
    if args.rollouts:
        raise ValueError("--rollouts names one file; with --compare each side's go to its run's eval/")
    other = resolve_eval_source(args.compare)
    settings = settings.resolved(source)  # the same settings for both sides
    sides = {}
    for name, side in (("a", source), ("b", other)):
        metrics, groups, tokenizer = run_eval(side, rows, settings)
        if (rollouts := default_rollouts_path(side)) is not None:
            write_eval_rollouts(rollouts, groups, tokenizer)
            print(f"aloft: {name} trajectories in {rollouts}", file=sys.stderr)
        sides[name] = (side, metrics, solved_by_item(groups, args.solved_reward))
    result, items = compare(sides["a"][2], sides["b"][2], seed=args.seed)
    summary = {
        name: {"model": args.model if name == "a" else args.compare, "label": side.label, **metrics}
        for name, (side, metrics, _) in sides.items()
    } | {"comparison": result.as_dict(), "solved_reward": args.solved_reward}
    if args.comparison_out:
        Path(args.comparison_out).write_text(json.dumps({**summary, "items": items}, indent=1))
    print(json.dumps(summary, indent=1))
    print(
        f"aloft: b - a = {result.gain:+.1%} of {result.items} items (95% CI {result.ci_low:+.1%} to "
        f"{result.ci_high:+.1%}; only a {result.only_a}, only b {result.only_b}; McNemar p = "
        f"{result.p_value:.3g})",
        file=sys.stderr,
    )
    return 0


def _env_config(text: str | None) -> dict[str, Any] | None:
    """``--env-config`` read as a YAML mapping (None when not given); anything else is a ``ValueError``."""
    import yaml

    if text is None:
        return None
    try:
        env_config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(
            f"--env-config is {yaml_problem(error)}; pass a mapping, e.g. '{{max_turns: 3}}'"
        ) from None
    if not isinstance(env_config, dict):
        raise ValueError(f"--env-config must be a mapping, e.g. '{{max_turns: 3}}', got {text!r}")
    return env_config


def add_builder_options(parser: argparse.ArgumentParser, example: str) -> None:
    """``-o KEY=VALUE``, repeatable: keyword options for a dataset builder (see ``builder_options``)."""
    parser.add_argument(
        "-o",
        "--option",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a builder option, repeatable (e.g. -o {example})",
    )


def builder_options(pairs: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> builder options, each value read as YAML (``3`` -> 3)."""
    import yaml

    options = {}
    for option in pairs:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise ValueError(f"builder option {option!r} must look like key=value")
        try:
            options[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            raise ValueError(
                f"builder option {option!r}: the value is {yaml_problem(error)}; "
                "give a YAML value, e.g. -o max_turns=3 or -o db=chinook"
            ) from None
    return options
