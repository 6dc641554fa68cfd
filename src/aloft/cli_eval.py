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
from aloft.cli_settings import DeprecatedFlag, note_deprecated_flags, parse_settings

EVAL_KEYS: dict[str, str] = {
    "data.eval_files": "data",
    "data.builder": "builder",
    "data.eval_size": "size",
    "data.eval_split": "split",
    "data.builder_args": "options",
    "data.builder_args.*": "options",
    "env.name": "env",
    "env.config": "env_config",
    "env.config.*": "env_config",
    "generator.eval_n_samples": "n",
    "generator.eval_temperature": "temperature",
    "generator.max_new_tokens": "max_new_tokens",
    "generator.max_turns": "max_turns",
    "generator.max_total_tokens": "max_total_tokens",
    "generator.stop": "stop",
    "engine.backend": "backend",
    "engine.urls": "url",
    "engine.dtype": "dtype",
    "trainer.seed": "seed",
}
"""The config keys ``aloft eval`` reads (the same keys, with the same meaning, as ``aloft train``)
-> the argument each sets. Without them: the run's settings, else the defaults below."""

EVAL_DEFAULTS: dict[str, Any] = {
    "data": [],
    "size": 64,
    "split": "eval",
    "options": [],
    "seed": 1_000_003,
    "n": 1,
    "temperature": 0.0,
}

DEPRECATED_EVAL_FLAGS = [
    DeprecatedFlag("--data", "data.eval_files"),
    DeprecatedFlag("--builder", "data.builder"),
    DeprecatedFlag("--size", "data.eval_size"),
    DeprecatedFlag("--split", "data.eval_split"),
    DeprecatedFlag("-o", "data.builder_args.<key>", dest="options"),
    DeprecatedFlag("--stop", "generator.stop"),
    DeprecatedFlag("--seed", "trainer.seed"),
    DeprecatedFlag("--env", "env.name"),
    DeprecatedFlag("--env-config", "env.config"),
    DeprecatedFlag("--n", "generator.eval_n_samples"),
    DeprecatedFlag("--temperature", "generator.eval_temperature"),
    DeprecatedFlag("--max-new-tokens", "generator.max_new_tokens"),
    DeprecatedFlag("--max-turns", "generator.max_turns"),
    DeprecatedFlag("--max-total-tokens", "generator.max_total_tokens"),
    DeprecatedFlag("--backend", "engine.backend"),
    DeprecatedFlag("--url", "engine.urls"),
    DeprecatedFlag("--dtype", "engine.dtype"),
]
"""The flags that spelled settings before the one grammar; they work, with a note, for one release."""


def add_eval_parser(sub: Any, add_debug: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``eval`` subcommand's arguments on ``sub`` (argparse subparsers)."""
    keys = ", ".join(k.replace(".*", ".<key>") for k in EVAL_KEYS)
    ev = sub.add_parser(
        "eval",
        help="mean reward and pass@k of a model, run or checkpoint (LoRA too, unexported) on a dataset",
        usage="aloft eval MODEL [section.key=value ...] [--rollouts FILE] [--compare OTHER] [--debug]",
        description="Settings are the config keys aloft train takes, with the same meaning: "
        f"{keys}. Without them a run or checkpoint brings its run's settings and eval rows. Example: "
        "aloft eval runs/quickstart data.builder=arithmetic data.eval_size=64 generator.eval_n_samples=4",
    )
    ev.add_argument(
        "model",
        help="model dir, built-in name, run dir (its export/ or latest checkpoint) or checkpoint dir; "
        "a run or checkpoint brings its run's env config, stop strings, limits, engine and eval rows",
    )
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
        "paired gain in items solved, its 95%% CI and the exact McNemar p (needs "
        "generator.eval_n_samples=1)",
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
    deprecated = ev.add_argument_group("deprecated flags (each works for one release; use the key)")
    for flag in DEPRECATED_EVAL_FLAGS:
        names = ["-o", "--option"] if flag.flag == "-o" else [flag.flag]
        repeated = flag.dest in ("stop", "url", "options")
        deprecated.add_argument(
            *names,
            dest=flag.dest,
            default=None,
            action="append" if repeated else "store",
            nargs="*" if flag.dest == "data" else None,
            type=_FLAG_TYPES.get(flag.dest, str),
            help=f"use {flag.key}",
        )
    add_debug(ev)


_FLAG_TYPES: dict[str, Callable[[str], Any]] = {
    "size": int,
    "seed": int,
    "n": int,
    "temperature": float,
    "max_new_tokens": int,
    "max_turns": int,
    "max_total_tokens": int,
}


def apply_eval_settings(args: argparse.Namespace) -> None:
    """``args`` with the deprecated flags noted, the dotted settings applied over them, and the
    defaults filled in where neither gave a value."""
    note_deprecated_flags(args, DEPRECATED_EVAL_FLAGS, "eval")
    values = parse_settings(getattr(args, "settings", []), list(EVAL_KEYS), "eval")
    if args.env_config is not None:
        args.env_config = _env_config(args.env_config)
    args.options = builder_options(args.options or [])
    for key, value in values.items():
        if key == "data.builder_args":
            args.options.update(value)
        elif key.startswith("data.builder_args."):
            args.options[key.removeprefix("data.builder_args.")] = value
        elif key.startswith("env.config."):
            args.env_config = {**(args.env_config or {}), key.removeprefix("env.config."): value}
        else:
            setattr(args, EVAL_KEYS[key], value)
    args.size_given = args.size is not None
    for dest, default in EVAL_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def run_eval_command(args: argparse.Namespace) -> int:
    """``aloft eval``: one model's scores, or two compared item by item (``--compare``)."""
    from aloft.config.loading import import_plugins
    from aloft.data import build_dataset, read_rows, validate_row
    from aloft.trainer.eval_command import (
        EvalSettings,
        default_rollouts_path,
        resolve_eval_source,
        run_eval,
        write_eval_rollouts,
    )

    apply_eval_settings(args)
    source = resolve_eval_source(args.model)
    import_plugins(source.default("trainer.imports", []))  # a run's own envs (its trainer.imports)
    if args.data:
        rows = [r for path in args.data for r in read_rows(path, default_env=args.env)]
    elif args.builder:
        raw = build_dataset(args.builder, n=args.size, seed=args.seed, split=args.split, **args.options)
        rows = [
            validate_row(r, i, f"builder {args.builder}", default_env=args.env) for i, r in enumerate(raw)
        ]
    else:
        rows = source.eval_rows(args.env)
    if not rows:
        raise ValueError(
            "eval needs rows: data.eval_files=[FILE], data.builder=NAME, or a run that has eval rows"
        )
    env_config = args.env_config
    # data.eval_size caps given files, and a run's own rows when it is set (as it caps eval files in a run)
    rows = rows[: args.size] if (args.data or args.size_given) and args.size > 0 else rows
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
        raise ValueError(f"--compare pairs one sample an item: set generator.eval_n_samples=1 (got {args.n})")
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
