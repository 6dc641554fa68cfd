"""The ``aloft`` command: train, eval, data, serve, --version.

aloft train quickstart trainer.max_steps=20 algorithm.advantage=rloo
aloft train --help                      # every config field with its doc
aloft eval runs/quickstart data.builder=arithmetic generator.eval_n_samples=4
aloft data build sql --size 20 --split eval --out sql_eval.jsonl data.builder_args.db=chinook
aloft data list
aloft serve MODEL --port 8000 --api-key KEY   # OpenAI-compatible server (needs aloft[serve])
aloft tinker-serve MODEL --port 8001          # the Tinker API (needs aloft[tinker])

A user's mistake (a missing file, package or model, a bad value) ends any command with one line and exit
2 (``aloft.cli_errors``); ``--debug`` (or ``ALOFT_DEBUG=1``, which it passes on to the commands it
starts, e.g. an experiment's runs) shows the traceback. Any other error is a bug: it keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

from aloft import __version__
from aloft.cli_errors import expected_failure, yaml_problem
from aloft.cli_eval import add_builder_options, add_eval_parser, builder_options, run_eval_command
from aloft.cli_settings import DeprecatedFlag, note_deprecated_flags, parse_settings, split_settings

DEBUG_HELP = "show the traceback behind a one-line error"
DEBUG_ENV = "ALOFT_DEBUG"
"""Set to 1 by ``--debug`` (or by hand): the command and every ``aloft`` command it starts show tracebacks."""
SETTINGS_COMMANDS = ("eval", "data", "experiment", "serve", "tinker-serve")
"""Subcommands that take ``section.key=value`` settings (``aloft train`` parses its own)."""
DATA_BUILD_KEYS = ["data.builder_args", "data.builder_args.*"]
SERVE_KEYS = ["engine.backend", "engine.dtype"]
"""The config keys ``aloft data build`` and ``aloft serve`` read (``aloft eval``'s: ``EVAL_KEYS``)."""


def main(argv: list[str] | None = None) -> int:
    """Run one ``aloft`` command; an expected error becomes one line on stderr and its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV) == "1"
    command = argv[0] if argv else ""
    outer = os.environ.get(DEBUG_ENV)
    if debug:  # while it runs, the commands it starts (an experiment's runs) show tracebacks too
        os.environ[DEBUG_ENV] = "1"
    try:
        return _dispatch(argv)
    except Exception as error:
        if (failure := None if debug else expected_failure(error, command)) is None:
            raise  # a bug (or --debug): the traceback is the report
        print(f"aloft: {failure[0]}", file=sys.stderr)
        return failure[1]
    finally:  # called in-process (tests, notebooks), the caller's environment stays as it was
        if outer is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = outer


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "train":
        return _train([word for word in argv[1:] if word != "--debug"])
    parser, data = build_parser()
    settings: list[str] = []
    if argv and argv[0] in SETTINGS_COMMANDS:  # section.key=value words, anywhere after the command
        settings, rest = split_settings(argv[1:])
        argv = [argv[0], *rest]
    args = parser.parse_args(argv)
    args.settings = args.overrides = settings
    if args.command == "serve":
        return _serve(args)
    if args.command == "tinker-serve":
        return _tinker_serve(args)
    if args.command == "eval":
        return run_eval_command(args)
    if args.command == "experiment":
        from aloft.cli_experiment import run_experiment_command

        return run_experiment_command(args)
    if args.command == "data":
        return _data(args, data)
    if args.command == "report":
        return _report(args)
    parser.print_help()
    return 1


def _report(args: argparse.Namespace) -> int:
    from aloft.report import ReportError, build_report

    if args.samples_per_step < 1:
        raise ReportError("--samples-per-step must be at least 1")
    if args.serve:
        from aloft.report.serve import serve_report

        serve_report(args.runs, port=args.port, samples_per_step=args.samples_per_step)
        return 0
    out = args.out or os.path.join(args.runs[0], "report.html")
    if Path(out).is_dir():  # checked first: the page is written next to it, then renamed onto it
        raise ReportError(f"--out {out} is a directory; pass the HTML file to write, e.g. {out}/report.html")
    path = build_report(args.runs, out, samples_per_step=args.samples_per_step)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    if args.png:
        from aloft.report import load_run
        from aloft.report.png import export_pngs

        images = export_pngs([load_run(run) for run in args.runs], args.png)
        print(f"wrote {len(images)} PNG images to {args.png}")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``aloft`` parser (every command but ``train``, which takes config overrides) and its
    ``data`` sub-parser."""
    parser = argparse.ArgumentParser(prog="aloft", description="Reinforcement learning for language models.")
    parser.add_argument("--version", action="version", version=f"aloft {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser(
        "train", help="train (or resume) a run: aloft train PRESET_OR_YAML [key=value ...] [--debug]"
    )
    rep = sub.add_parser(
        "report",
        help="one HTML page of runs' curves, evals, config and trajectories: aloft report RUN [RUN ...]",
    )
    rep.add_argument("runs", nargs="+", help="run directories (runs/<name>); several are overlaid")
    rep.add_argument("--out", default=None, help="the HTML file (default: RUN/report.html of the first run)")
    rep.add_argument(
        "--samples-per-step",
        type=int,
        default=32,
        help="trajectories per step in the browser (whole groups first)",
    )
    rep.add_argument(
        "--png", default=None, metavar="DIR", help="also write the main curves as PNG images to DIR"
    )
    rep.add_argument(
        "--serve", action="store_true", help="serve the page on 127.0.0.1, refreshed while the runs train"
    )
    rep.add_argument("--port", type=int, default=8765, help="--serve: the port (127.0.0.1 only)")
    _add_debug(rep)
    add_eval_parser(sub, _add_debug)
    data = sub.add_parser("data", help="build ready-to-train datasets: aloft data build NAME --out FILE")
    _add_debug(data)
    data_sub = data.add_subparsers(dest="data_command")
    _add_debug(data_sub.add_parser("list", help="the built-in dataset builders"))
    build = data_sub.add_parser(
        "build",
        help="write rows of a built-in builder (.jsonl or .parquet)",
        usage="aloft data build NAME --out FILE [--size N] [--split SPLIT] [--seed S] "
        "[data.builder_args.KEY=VALUE ...] [--debug]",
        description="The builder's options are the keys aloft train gives it: data.builder_args.KEY=VALUE "
        "(e.g. data.builder_args.source=gsm_symbolic).",
    )
    build.add_argument("name", help="builder: arithmetic, reasoning_gym, math, mmath, code, search, sql")
    build.add_argument(
        "--size", type=int, default=None, help="rows to build (fixed datasets: 0 or unset for all)"
    )
    old_spellings = build.add_argument_group("deprecated flags (each works for one release)")
    old_spellings.add_argument("--n", type=int, default=None, help="use --size")
    add_builder_options(old_spellings, example="source=gsm_symbolic")
    build.add_argument(
        "--split",
        choices=["train", "eval", "heldout", "all"],
        default="train",
        help="which split; 'all' writes every split the builder has to OUT/<split>.jsonl (OUT a directory)",
    )
    build.add_argument("--seed", type=int, default=0)
    build.add_argument(
        "--out", required=True, help="output file (.jsonl or .parquet), or a directory for --split all"
    )
    _add_debug(build)
    exp = sub.add_parser(
        "experiment",
        help="reproduce a published result: aloft experiment skyrl-sql [--quick] [section.key=value ...]",
    )
    exp.add_argument("name", choices=["skyrl-sql"], help="which experiment")
    exp.add_argument("--out", default="experiments/skyrl-sql", help="output directory (data, runs, report)")
    exp.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="training seeds")
    exp.add_argument(
        "--variants",
        nargs="+",
        choices=["multi_turn", "single_turn"],
        default=["multi_turn", "single_turn"],
        help="which policies to train (the report covers every run there is)",
    )
    exp.add_argument(
        "--stages",
        nargs="+",
        choices=["study", "train", "eval"],
        default=["study", "train", "eval"],
        help="what to run after the data and the warm start: the learning-rate study, the long runs, "
        "the start/end evals on every question (default: all three, in that order)",
    )
    exp.add_argument(
        "--eval-size", type=int, default=32, help="held-out questions in the runs' periodic eval"
    )
    exp.add_argument("--train-size", type=int, default=0, help="training questions (0: all)")
    exp.add_argument("--quick", action="store_true", help="3 steps per run: a smoke test of the pipeline")
    exp.add_argument(
        "--no-hint",
        action="store_true",
        help="SkyRL-SQL's exact prompts, without the one-line format reminder",
    )
    exp.add_argument(
        "--warm-start",
        type=int,
        default=32,
        help="train questions for the protocol warm start both policies start from (0: none)",
    )
    exp.add_argument("--report-only", action="store_true", help="rewrite the report from the runs so far")
    exp.add_argument(
        "--state",
        default=None,
        metavar="DIR",
        help="keep the experiment's small state (adapters, metrics, outcomes: megabytes) in DIR too: "
        "restored into --out where it lacks it, saved after each stage; commit DIR to go on elsewhere",
    )
    exp.add_argument(
        "--save-state",
        default=None,
        metavar="DIR",
        help="only save --out's small state into DIR (e.g. after stopping a run) and exit",
    )
    exp.add_argument_group("deprecated flags (each works for one release; use the key)").add_argument(
        "--model", default=None, help="use model.path (default: the skyrl_sql preset's)"
    )
    _add_debug(exp)
    srv = sub.add_parser(
        "serve",
        help="an OpenAI-compatible server over an engine: aloft serve MODEL",
        usage="aloft serve MODEL [engine.backend=hf] [engine.dtype=auto] [--port P] [--api-key KEY] ...",
        description="Settings are the config keys aloft train takes, with the same meaning and "
        "defaults: engine.backend (hf), engine.dtype (auto: bfloat16 where the hardware has native "
        "bf16 math, else float32).",
    )
    srv.add_argument("model", help="model dir, built-in name or hub id")
    srv.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY (all but /health)")
    srv.add_argument("--served-model-name", default=None, help="model id in /v1/models (default: MODEL)")
    srv.add_argument(
        "--capture",
        default=None,
        metavar="DIR",
        help="record each session's exact prompt and sampled token ids to DIR/<session>.jsonl",
    )
    old_spellings = srv.add_argument_group("deprecated flags (each works for one release; use the key)")
    old_spellings.add_argument(
        "--dtype", choices=["float32", "bfloat16", "auto"], default=None, help="use engine.dtype"
    )
    old_spellings.add_argument("--backend", default=None, help="use engine.backend")
    _add_debug(srv)
    tinker = sub.add_parser("tinker-serve", help="the Tinker API over aloft: aloft tinker-serve MODEL")
    tinker.add_argument(
        "model", nargs="?", default=None, help="base model: model dir, built-in name or hub id"
    )
    tinker.add_argument(
        "--model",
        dest="model_flag",
        default=None,
        help="deprecated (works for one release): give MODEL first",
    )
    tinker.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    tinker.add_argument("--port", type=int, default=8001)
    tinker.add_argument("--max-length", type=int, default=4096, help="longest datum or prompt, in tokens")
    tinker.add_argument(
        "--checkpoint-dir",
        default="tinker-checkpoints",
        help="where tinker:// paths live (default: ./tinker-checkpoints)",
    )
    tinker.add_argument(
        "--session-timeout",
        type=float,
        default=300.0,
        help="seconds without a request or heartbeat after which a session's clients are freed",
    )
    tinker.add_argument(
        "--api-key", default=None, help="require this X-API-Key (TINKER_API_KEY); default: any"
    )
    _add_debug(tinker)
    return parser, data


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """``--debug``, in the command's usage and help. ``main`` reads it from the raw words, so it also
    covers errors that happen before (or without) the parser, as in ``aloft train``."""
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def _train(argv: list[str]) -> int:
    """``aloft train`` (``--debug`` already taken out by ``main``); a bad setting is a ``ConfigError``
    and a run stopped by failed trajectories ``TooManyFailures``, each one line (``expected_failure``)."""
    import yaml

    from aloft.config import ConfigError, describe_fields, load_config, presets

    if not argv or argv[0] in ("-h", "--help"):
        _import_named_modules(argv[1:])
        print(_train_help(describe_fields(), presets()))
        return 0
    target, overrides = argv[0], argv[1:]
    if "=" in target:  # no preset, only overrides
        target, overrides = None, argv
    try:
        config = load_config(target, overrides)
    except yaml.YAMLError as error:  # an override that is not YAML is read as a string: it is the file
        raise ConfigError(f"{target} is {yaml_problem(error)}; fix the file") from None
    from aloft.trainer import train

    final = train(config)
    if os.environ.get("RANK", "0") != "0":
        return 0  # one summary per run: the other ranks of a torchrun launch stay quiet
    keys = [
        k for k in final if k.startswith("eval/reward") or k.startswith("eval/pass") or k == "reward/mean"
    ]
    print(json.dumps({k: round(final[k], 4) for k in sorted(keys)}))
    return 0


def _train_help(
    fields: list[tuple[str, str, str, str]], preset_names: list[str], builtin_only: bool = False
) -> str:
    """``aloft train --help``: the usage, the presets, every config field with its doc, and the
    settings plugins declared (``builtin_only``: aloft's own plugins alone, for the CLI reference)."""
    lines = [
        "usage: aloft train PRESET_OR_YAML [section.key=value ...] [--debug]",
        "",
        f"presets: {', '.join(preset_names)}",
        "Rerunning the same command resumes from the run's latest checkpoint. A bad setting stops the",
        "run before the model loads with one line (exit 2); --debug shows the traceback behind it.",
        "",
        "fields (section.key  type = default):",
    ]
    section = None
    for key, type_name, default, doc in fields:
        head = key.split(".")[0]
        if head != section:
            section = head
            lines.append(f"\n[{head}]")
        lines.append(f"  {key}  {type_name} = {default}")
        lines.extend(textwrap.wrap(doc, width=100, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines + _plugin_params_help(builtin_only))


def _plugin_params_help(builtin_only: bool) -> list[str]:
    """The settings every registered estimator, loss, plan and env declared, under the config
    section where the user sets them."""
    from aloft import gym
    from aloft.algorithms import declared_params
    from aloft.config.loading import describe_model
    from aloft.trainer.plans import declared_plan_params

    sections: list[tuple[str, str, dict[str, type]]] = [
        (
            "algorithm.params",
            "estimators and losses",
            {f"{kind} {name}": model for (kind, name), model in declared_params().items()},
        ),
        (
            "trainer.plan_params",
            "execution plans",
            {f"execution plan {name}": model for name, model in declared_plan_params().items()},
        ),
        (
            "env.config",
            "envs",
            {f"env {env_id}": model for env_id in gym.registered() if (model := gym.params_of(env_id))},
        ),
    ]
    lines: list[str] = []
    for section, plural, declared in sections:
        lines += ["", f"[{section}] settings declared by registered {plural}:"]
        shown = {
            owner: model
            for owner, model in declared.items()
            if not builtin_only or model.__module__.startswith("aloft.")
        }
        for owner, model in shown.items():
            lines.append(f"  {owner}:")
            for key, type_name, default, doc in describe_model(model):
                lines.append(f"    {section}.{key}  {type_name} = {default}")
                lines.extend(
                    textwrap.wrap(doc, width=100, initial_indent="        ", subsequent_indent="        ")
                )
        if not shown:
            lines.append("  (none; `aloft train --help trainer.imports=[my_module]` lists your module's)")
    return lines


def _import_named_modules(words: list[str]) -> None:
    """Import the modules of a ``trainer.imports=[...]`` word, so that help lists what they register."""
    import importlib

    import yaml

    for word in words:
        if word.startswith("trainer.imports="):
            for module in yaml.safe_load(word.partition("=")[2]) or []:
                importlib.import_module(module)


DEPRECATED_DATA_FLAGS = [
    DeprecatedFlag("--n", "--size"),
    DeprecatedFlag("-o", "data.builder_args.<key>", dest="options"),
]
DEPRECATED_SERVE_FLAGS = [
    DeprecatedFlag("--dtype", "engine.dtype"),
    DeprecatedFlag("--backend", "engine.backend"),
]
"""Flags that spelled settings before the one grammar (``aloft.cli_settings``): one more release."""


def _serve(args: argparse.Namespace) -> int:
    from aloft.inference.serving import serve  # needs fastapi and uvicorn: aloft[serve]
    from aloft.models import resolve_model_path

    note_deprecated_flags(args, DEPRECATED_SERVE_FLAGS, "serve")
    engine = parse_settings(args.settings, SERVE_KEYS, "serve")
    serve(
        resolve_model_path(args.model),
        host=args.host,
        port=args.port,
        dtype=engine.get("engine.dtype", args.dtype or "auto"),
        api_key=args.api_key,
        backend=engine.get("engine.backend", args.backend or "hf"),
        served_model_name=args.served_model_name or args.model,
        capture_dir=args.capture,
    )
    return 0


def _tinker_serve(args: argparse.Namespace) -> int:
    from aloft.tinker.server import serve  # needs the tinker extra: aloft[tinker]

    parse_settings(args.settings, [], "tinker-serve")  # it takes none: a key=value word is a mistake
    if args.model_flag is not None:
        print(
            "aloft tinker-serve: --model is deprecated and goes in the next release; give MODEL first, "
            "as aloft serve takes it",
            file=sys.stderr,
        )
    model = args.model or args.model_flag
    if model is None:
        raise ValueError(
            "aloft tinker-serve needs a model: aloft tinker-serve MODEL (a model dir, built-in name or hub id)"
        )
    serve(
        model,
        host=args.host,
        port=args.port,
        checkpoint_dir=args.checkpoint_dir,
        max_length=args.max_length,
        api_key=args.api_key,
        session_timeout_s=args.session_timeout,
    )
    return 0


def _data(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from aloft.data import build_dataset, dataset_builders, dataset_splits, is_fixed_dataset, write_rows

    if args.data_command == "list":
        parse_settings(args.settings, [], "data list")  # it takes none: a key=value word is a mistake
        print("\n".join(dataset_builders()))
        return 0
    if args.data_command != "build":
        parser.print_help()
        return 1
    note_deprecated_flags(args, DEPRECATED_DATA_FLAGS, "data build")
    options = builder_options(args.options or [])
    settings = parse_settings(args.settings, DATA_BUILD_KEYS, "data build")
    for key, value in settings.items():
        if key == "data.builder_args":
            options.update(value)
        else:
            options[key.removeprefix("data.builder_args.")] = value
    size = args.size if args.size is not None else args.n
    splits = dataset_splits(args.name) if args.split == "all" else [args.split]
    if size is None and not is_fixed_dataset(args.name):
        raise ValueError(f"dataset builder {args.name!r} generates rows: give their number with --size")
    built = {
        split: build_dataset(args.name, n=size or 0, seed=args.seed, split=split, **dict(options))
        for split in splits
    }
    for split, rows in built.items():
        out = Path(args.out) / f"{split}.jsonl" if args.split == "all" else Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_rows(out, rows)
        print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
